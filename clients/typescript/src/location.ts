/** Where in the user's code something happened: the first frame of a stack outside the SDK. */

/** The directory of the SDK's own modules (this one's). */
const SDK_DIR = new URL(".", import.meta.url).href;

/** The `file:line:column` of the first frame of `stack` that is not in the SDK's own modules, if any. */
export function codeLocation(stack: string | undefined): string | undefined {
  for (const frame of (stack ?? "").split("\n").slice(1)) {
    if (frame.includes(SDK_DIR) || frame.includes("node:internal")) continue;
    const where = /(?:\(|at )([^()]*:\d+:\d+)\)?$/.exec(frame.trim())?.[1];
    if (where) return where;
  }
  return undefined;
}
