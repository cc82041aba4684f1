import { evaluatePolicy, parsePolicy, PolicyError } from './policy';

describe('tool policy', () => {
  const policy = parsePolicy({
    default: { deny: ['format_*'] },
    tenants: {
      acme: {
        allow: ['search', 'deploy', 'read_*'],
        threads: { 'incident-42': { deny: ['deploy'] }, broad: { allow: ['*'] } },
      },
    },
  });

  it('given no policy, when any tool is evaluated, then it is allowed', () => {
    expect(evaluatePolicy({}, 'acme', 't', 'anything')).toEqual({ allowed: true });
  });

  it('given a default deny glob, when a matching tool is evaluated for any tenant, then it is denied', () => {
    expect(evaluatePolicy(policy, 'other', 't', 'format_disk')).toEqual({
      allowed: false,
      rule: 'default.deny',
    });
    expect(evaluatePolicy(policy, 'other', 't', 'search')).toEqual({ allowed: true });
  });

  it('given a tenant allow list, when a tool outside it is evaluated, then it is denied', () => {
    expect(evaluatePolicy(policy, 'acme', 't', 'read_file')).toEqual({ allowed: true });
    expect(evaluatePolicy(policy, 'acme', 't', 'drop_table')).toMatchObject({ allowed: false });
  });

  it('given a thread layer, when it denies, then it narrows its tenant', () => {
    expect(evaluatePolicy(policy, 'acme', 'incident-42', 'deploy')).toMatchObject({
      allowed: false,
    });
    expect(evaluatePolicy(policy, 'acme', 'quiet', 'deploy')).toEqual({ allowed: true });
  });

  it("given a thread layer that allows everything, when the tenant's allow list excludes a tool, then it stays denied", () => {
    expect(evaluatePolicy(policy, 'acme', 'broad', 'drop_table')).toEqual({
      allowed: false,
      rule: 'tenants.acme.allow does not include it',
    });
    expect(evaluatePolicy(policy, 'acme', 'broad', 'format_disk')).toMatchObject({
      allowed: false,
    });
  });

  it.each([
    [[], 'the policy must be an object'],
    [{ rules: {} }, 'rules is not allowed at the top level'],
    [{ default: { allow: 'search' } }, 'default.allow must be a list of tool-name globs'],
    [{ default: { permit: [] } }, 'default.permit is not allowed'],
    [{ tenants: { acme: { threads: [] } } }, 'tenants.acme.threads must be an object'],
  ])('refuses an invalid policy %j, naming where', (value, message) => {
    expect(() => parsePolicy(value)).toThrow(PolicyError);
    expect(() => parsePolicy(value)).toThrow(message);
  });
});
