/**
 * Profiles a stretch of this process's own work with the V8 sampling profiler (the one
 * `node --cpu-prof` uses, through the inspector, so only the stretch is sampled), saves the
 * profile for Chrome DevTools / speedscope and sums it up: where the samples landed (self
 * time) and how much of the time was spent under given functions (inclusive time).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Session, type Profiler } from 'node:inspector/promises';
import { join, relative } from 'node:path';
import { ROOT } from './report';

export interface Profiled<T> {
  result: T;
  profile: Profiler.Profile;
}

export async function profiled<T>(work: () => Promise<T>): Promise<Profiled<T>> {
  const session = new Session();
  session.connect();
  try {
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 500 });
    await session.post('Profiler.start');
    const result = await work();
    const { profile } = await session.post('Profiler.stop');
    await session.post('Profiler.disable');
    return { result, profile };
  } finally {
    session.disconnect();
  }
}

export function saveProfile(profile: Profiler.Profile, dir: string, name: string): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name}.cpuprofile`);
  writeFileSync(file, JSON.stringify(profile));
  return file;
}

export interface FrameTime {
  /** `function (file:line)`, the file relative to the repository. */
  frame: string;
  functionName: string;
  file: string;
  /** Share of the sampled time, 0–1. */
  share: number;
}

export interface ProfileSummary {
  /** Sampled time, ms. */
  totalMs: number;
  /** Most self time first. */
  self: FrameTime[];
  /** Share of the sampled time spent under any frame the predicate accepts (0–1). */
  inclusive(match: (frame: { functionName: string; file: string }) => boolean): number;
}

export function summarizeProfile(profile: Profiler.Profile): ProfileSummary {
  const parent = new Map<number, number>();
  const byId = new Map<number, Profiler.ProfileNode>();
  for (const node of profile.nodes) {
    byId.set(node.id, node);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const fileOf = (node: Profiler.ProfileNode) => {
    const url = node.callFrame.url;
    if (url === '') return '';
    const path = url.startsWith('file://') ? new URL(url).pathname : url;
    return path.startsWith('/') ? relative(ROOT, path) : path;
  };
  const labelOf = (node: Profiler.ProfileNode) => {
    const name = node.callFrame.functionName || '(anonymous)';
    const file = fileOf(node);
    return file === '' ? name : `${name} (${file}:${node.callFrame.lineNumber + 1})`;
  };
  // Time per sample: its delta to the next one (the last sample gets the mean).
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  const weights = samples.map((_, i) => deltas[i + 1] ?? 0);
  const total = weights.reduce((sum, w) => sum + w, 0) || 1;
  const selfTime = new Map<string, { node: Profiler.ProfileNode; time: number }>();
  samples.forEach((id, i) => {
    const node = byId.get(id);
    if (!node) return;
    const label = labelOf(node);
    const entry = selfTime.get(label) ?? { node, time: 0 };
    entry.time += weights[i];
    selfTime.set(label, entry);
  });
  const self = [...selfTime.entries()]
    .map(([frame, { node, time }]) => ({
      frame,
      functionName: node.callFrame.functionName,
      file: fileOf(node),
      share: time / total,
    }))
    .sort((a, b) => b.share - a.share);
  return {
    totalMs: total / 1000,
    self,
    inclusive(match) {
      let time = 0;
      samples.forEach((id, i) => {
        for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
          const node = byId.get(at);
          if (node && match({ functionName: node.callFrame.functionName, file: fileOf(node) })) {
            time += weights[i];
            return;
          }
        }
      });
      return time / total;
    },
  };
}
