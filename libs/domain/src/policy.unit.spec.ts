import { evaluatePolicy, parsePolicy, PolicyError, type PolicyDocument } from './policy';

describe('tool policy', () => {
  // Parsed in a hook, not at collection: a parser that throws fails the tests, not the file.
  let policy: PolicyDocument;
  beforeAll(() => {
    policy = parsePolicy({
      default: { deny: ['format_*'] },
      tenants: {
        acme: {
          allow: ['search', 'deploy', 'read_*'],
          threads: { 'incident-42': { deny: ['deploy'] }, broad: { allow: ['*'] } },
        },
      },
    });
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
    expect(evaluatePolicy(policy, 'acme', 'incident-42', 'deploy')).toEqual({
      allowed: false,
      rule: 'tenants.acme.threads.incident-42.deny',
    });
    expect(evaluatePolicy(policy, 'acme', 'quiet', 'deploy')).toEqual({ allowed: true });
  });

  it("given a thread layer that allows everything, when the tenant's allow list excludes a tool, then it stays denied", () => {
    expect(evaluatePolicy(policy, 'acme', 'broad', 'drop_table')).toEqual({
      allowed: false,
      rule: 'tenants.acme.allow does not include it',
    });
    expect(evaluatePolicy(policy, 'acme', 'broad', 'format_disk')).toEqual({
      allowed: false,
      rule: 'default.deny',
    });
  });

  it('given a deny in a lower layer and an allow list above it, when both refuse, then the deny is named', () => {
    expect(evaluatePolicy(policy, 'acme', 'incident-42', 'drop_table')).toEqual({
      allowed: false,
      rule: 'tenants.acme.allow does not include it',
    });
    const doc = parsePolicy({ default: { allow: ['search'] }, tenants: { acme: { deny: ['x'] } } });
    expect(evaluatePolicy(doc, 'acme', 't', 'x')).toEqual({
      allowed: false,
      rule: 'tenants.acme.deny',
    });
  });

  it('given a thread allow list, when a tool outside it is evaluated, then the thread layer is named', () => {
    const doc = parsePolicy({ tenants: { acme: { threads: { t1: { allow: ['search'] } } } } });
    expect(evaluatePolicy(doc, 'acme', 't1', 'search')).toEqual({ allowed: true });
    expect(evaluatePolicy(doc, 'acme', 't1', 'deploy')).toEqual({
      allowed: false,
      rule: 'tenants.acme.threads.t1.allow does not include it',
    });
    expect(evaluatePolicy(doc, 'acme', 't2', 'deploy')).toEqual({ allowed: true });
    expect(evaluatePolicy(doc, 'other', 't1', 'deploy')).toEqual({ allowed: true });
  });

  it('given a glob, when a tool name starts with a dot, then the glob matches it too', () => {
    const doc = parsePolicy({ default: { deny: ['*'] } });
    expect(evaluatePolicy(doc, 'acme', 't', '.hidden')).toEqual({
      allowed: false,
      rule: 'default.deny',
    });
  });

  it('refuses with an error named PolicyError, so that a log or a stack trace says what failed', () => {
    let thrown: unknown;
    try {
      parsePolicy({ rules: {} });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(PolicyError);
    expect((thrown as Error).name).toBe('PolicyError');
  });

  it.each([null, undefined])('reads a missing policy file (%p) as no policy', (value) => {
    expect(parsePolicy(value)).toEqual({});
  });

  it('keeps exactly the layers the file gives', () => {
    expect(
      parsePolicy({
        default: { allow: ['a*'], deny: ['ab'] },
        tenants: { acme: { deny: ['b'], threads: { t1: { allow: ['c'] } } }, beta: {} },
      }),
    ).toEqual({
      default: { allow: ['a*'], deny: ['ab'] },
      tenants: { acme: { deny: ['b'], threads: { t1: { allow: ['c'] } } }, beta: {} },
    });
  });

  it.each([
    [[], 'the policy must be an object'],
    [{ rules: {} }, 'rules is not allowed at the top level'],
    [{ default: { allow: 'search' } }, 'default.allow must be a list of tool-name globs'],
    [{ default: { permit: [] } }, 'default.permit is not allowed'],
    [{ tenants: { acme: { threads: [] } } }, 'tenants.acme.threads must be an object'],
    ['deny: [x]', 'the policy must be an object'],
    [{ default: [] }, 'default must be an object'],
    [{ default: { deny: ['ok', ''] } }, 'default.deny must be a list of tool-name globs'],
    [{ default: { allow: [1] } }, 'default.allow must be a list of tool-name globs'],
    [{ default: { threads: {} } }, 'default.threads is not allowed'],
    [{ tenants: [] }, 'tenants must be an object'],
    [{ tenants: { acme: { permit: [] } } }, 'tenants.acme.permit is not allowed'],
    [{ tenants: { acme: null } }, 'tenants.acme must be an object'],
    [
      { tenants: { acme: { threads: { t1: { threads: {} } } } } },
      'tenants.acme.threads.t1.threads is not allowed',
    ],
    [
      { tenants: { acme: { threads: { t1: { allow: 'x' } } } } },
      'tenants.acme.threads.t1.allow must be a list of tool-name globs',
    ],
  ])('refuses an invalid policy %j, naming where', (value, message) => {
    expect(() => parsePolicy(value)).toThrow(PolicyError);
    expect(() => parsePolicy(value)).toThrow(message);
  });
});
