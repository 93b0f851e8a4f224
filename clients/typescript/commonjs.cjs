// require("@dex/client") from CommonJS: the SDK is an ES module (Node 20 cannot require one).
throw new Error(
  "@dex/client is an ES module: import it (import { Worker } from \"@dex/client\", in a project " +
  "whose package.json has \"type\": \"module\", or a .mts file), or from CommonJS load it with " +
  "const dex = await import(\"@dex/client\")");
