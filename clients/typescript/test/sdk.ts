// What the tests use: the package's public API, plus conversions the tests compare with.
export * from "../src/index.js";
export { eventKind, commandKind } from "../src/convert.js";
