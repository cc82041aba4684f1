/**
 * Every deploy file is checked by a validator a platform engineer would trust: the compose
 * file against the compose-spec JSON schema (check-jsonschema's vendored copy), each Kubernetes manifest against the API
 * server's OpenAPI schemas (kubernetes-validate, strict: unknown fields fail), the
 * Dockerfile with hadolint. Then the properties issue 13 asks of them, one by one.
 * The Python tools come from `npm run deploy:tools` (pretest); no Docker engine is needed.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, parseAllDocuments, stringify } from 'yaml';

const ROOT = join(__dirname, '..');
const DEPLOY = join(ROOT, 'deploy');
const K8S = join(DEPLOY, 'k8s');
const TOOLS = join(ROOT, '.cache', 'deploy-tools', 'bin');

function tool(name: string): string {
  const path = join(TOOLS, name);
  if (!existsSync(path)) {
    throw new Error(`${path} is missing: run \`npm run deploy:tools\` (it installs ${name})`);
  }
  return path;
}

function run(command: string, args: string[]): { status: number | null; output: string } {
  const result = spawnSync(command, args, { cwd: ROOT, encoding: 'utf8' });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

/** A tag that names a release: not `latest`, not absent. */
function isPinned(image: string): boolean {
  const tag = /:([^/:@]+)$/.exec(image)?.[1];
  return tag !== undefined && tag !== 'latest';
}

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('deploy/compose.yaml', () => {
  const compose = parse(readFileSync(join(DEPLOY, 'compose.yaml'), 'utf8'), {
    merge: true,
  }) as Json;
  const validate = (file: string) =>
    run(tool('check-jsonschema'), ['--builtin-schema', 'vendor.compose-spec', file]);
  const services = compose.services as Record<string, Json>;

  it('is valid against the compose specification', () => {
    const result = validate(join(DEPLOY, 'compose.yaml'));
    expect(result.output).toContain('ok -- validation done');
    expect(result.status).toBe(0);
  });

  it('fails the same validation with a misspelt key, so the check can fail', () => {
    const broken = structuredClone(compose);
    broken.services.api.restrat = 'always';
    const file = join(mkdtempSync(join(tmpdir(), 'runledger-compose-')), 'compose.yaml');
    writeFileSync(file, stringify(broken));
    const result = validate(file);
    expect(result.status).not.toBe(0);
    expect(result.output).toContain('restrat');
  });

  it('runs KurrentDB on a volume, Kafka in KRaft mode, two api replicas and the mirror', () => {
    expect(Object.keys(services).sort()).toEqual(['api', 'kafka', 'kurrentdb', 'mirror']);
    expect(services.kurrentdb.volumes).toContain('kurrentdb-data:/var/lib/kurrentdb');
    expect(services.kafka.environment.KAFKA_PROCESS_ROLES).toBe('broker,controller');
    expect(services.api.deploy.replicas).toBe(2);
    expect(services.api.environment.EVENTSTORE_URL).toMatch(/^kurrentdb:\/\/kurrentdb:2113/);
    expect(services.mirror.environment.KAFKA_BROKERS).toBe('kafka:9092');
    expect(services.mirror.command).toEqual(['node', 'dist/services/mirror/src/main.js']);
  });

  it.each(['kurrentdb', 'kafka', 'api', 'mirror'])(
    '%s has a pinned image, a healthcheck and a restart policy',
    (name) => {
      const service = services[name];
      expect(isPinned(service.image)).toBe(true);
      expect(service.healthcheck?.test).toBeDefined();
      expect(service.restart).toBe('unless-stopped');
    },
  );

  it('starts each service only after what it needs is healthy', () => {
    const gates = (name: string) =>
      Object.fromEntries(
        Object.entries(services[name].depends_on as Record<string, Json>).map(([dep, rule]) => [
          dep,
          rule.condition,
        ]),
      );
    expect(gates('api')).toEqual({ kurrentdb: 'service_healthy' });
    expect(gates('mirror')).toEqual({ kurrentdb: 'service_healthy', kafka: 'service_healthy' });
  });
});

describe('deploy/k8s', () => {
  const files = readdirSync(K8S).filter((file) => file.endsWith('.yaml'));
  const docs: Json[] = files.flatMap((file) =>
    parseAllDocuments(readFileSync(join(K8S, file), 'utf8')).map((doc) => doc.toJS() as Json),
  );
  const ofKind = (kind: string) => docs.filter((doc) => doc.kind === kind);
  const deployments = ofKind('Deployment');

  it('every manifest passes strict schema validation against Kubernetes 1.37', () => {
    const result = run(tool('kubernetes-validate'), [
      '--strict',
      '-k',
      '1.37.0',
      ...files.map((file) => join(K8S, file)),
    ]);
    expect(result.output).not.toMatch(/ERROR|WARN/);
    expect(result.status).toBe(0);
    expect(result.output.match(/passed for resource/g)).toHaveLength(docs.length);
  });

  it('the validator refuses an unknown field, so the check can fail', () => {
    const dir = mkdtempSync(join(tmpdir(), 'runledger-k8s-'));
    const broken = structuredClone(deployments[0]);
    broken.spec.template.spec.containers[0].readinessProbes = {};
    writeFileSync(join(dir, 'broken.yaml'), JSON.stringify(broken));
    const result = run(tool('kubernetes-validate'), ['--strict', join(dir, 'broken.yaml')]);
    expect(result.status).not.toBe(0);
    expect(result.output).toContain('readinessProbes');
  });

  it('deploys the api and the mirror, each behind a Service', () => {
    const names = deployments.map((d) => d.metadata.name).sort();
    expect(names).toEqual(['runledger-api', 'runledger-mirror']);
    for (const deployment of deployments) {
      const labels = deployment.spec.template.metadata.labels as Record<string, string>;
      const service = ofKind('Service').find((s) =>
        Object.entries(s.spec.selector as Record<string, string>).every(
          ([key, value]) => labels[key] === value,
        ),
      );
      expect(service).toBeDefined();
    }
  });

  describe.each(['runledger-api', 'runledger-mirror'])('%s', (name) => {
    const deployment = () => deployments.find((d) => d.metadata.name === name)!;
    const container = () => deployment().spec.template.spec.containers[0] as Json;

    it('runs a pinned image as non-root on a read-only root filesystem', () => {
      const pod = deployment().spec.template.spec;
      expect(isPinned(container().image)).toBe(true);
      expect(pod.securityContext.runAsNonRoot).toBe(true);
      expect(pod.securityContext.runAsUser).toBeGreaterThan(0);
      expect(container().securityContext).toMatchObject({
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ['ALL'] },
      });
      const writable = (container().volumeMounts as Json[]).map((m) => m.mountPath).sort();
      expect(writable).toEqual(['/data', '/tmp']);
    });

    it('declares resources and start-up, readiness and liveness probes', () => {
      expect(container().resources.requests).toMatchObject({
        cpu: expect.any(String),
        memory: expect.any(String),
      });
      expect(container().resources.limits.memory).toEqual(expect.any(String));
      expect(container().startupProbe.httpGet.path).toBe('/health/live');
      expect(container().readinessProbe.httpGet.path).toBe('/health/ready');
      expect(container().livenessProbe.httpGet.path).toBe('/health/live');
    });

    it('reads its secrets from keys the Secret template defines', () => {
      const secret = ofKind('Secret').find((s) => s.metadata.name === 'runledger')!;
      const refs = (container().env as Json[])
        .map((e) => e.valueFrom?.secretKeyRef)
        .filter(Boolean) as { name: string; key: string }[];
      expect(refs.length).toBeGreaterThan(0);
      for (const ref of refs) {
        expect(ref.name).toBe('runledger');
        expect(Object.keys(secret.stringData)).toContain(ref.key);
      }
    });
  });
});

describe('deploy/Dockerfile', () => {
  const dockerfile = readFileSync(join(DEPLOY, 'Dockerfile'), 'utf8');
  const finalStage = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));

  it('passes hadolint', () => {
    const result = run(tool('hadolint'), [
      '--no-color',
      '--config',
      join(DEPLOY, '.hadolint.yaml'),
      join(DEPLOY, 'Dockerfile'),
    ]);
    expect(result.output).toBe('');
    expect(result.status).toBe(0);
  });

  it('hadolint fails a Dockerfile that breaks its rules, so the check can fail', () => {
    const dir = mkdtempSync(join(tmpdir(), 'runledger-docker-'));
    writeFileSync(join(dir, 'Dockerfile'), 'FROM node:latest\nRUN cd /app && npm ci\n');
    const result = run(tool('hadolint'), ['--no-color', join(dir, 'Dockerfile')]);
    expect(result.status).not.toBe(0);
    expect(result.output).toMatch(/DL3007/);
  });

  it('runs as a numeric non-root user that owns /data, with a HEALTHCHECK and no ts-node', () => {
    expect(finalStage).toMatch(/^USER 1000:1000$/m);
    expect(finalStage).toMatch(/chown 1000:1000 \/data/);
    expect(finalStage).toMatch(/^HEALTHCHECK /m);
    expect(finalStage).toMatch(/\/health\/live/);
    expect(dockerfile).not.toMatch(/ts-node/);
    expect(finalStage).toMatch(/npm prune --omit=dev|COPY --from=build \/app\/node_modules/);
  });

  it('has a .dockerignore keeping the host node_modules, data (the dev key) and caches out', () => {
    const ignored = readFileSync(join(ROOT, '.dockerignore'), 'utf8').split('\n');
    for (const entry of ['node_modules', 'data', '.cache', '.git', 'dist']) {
      expect(ignored).toContain(entry);
    }
  });
});
