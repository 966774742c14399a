// Validates Kubernetes objects (on stdin a JSON array of {"source": where it came from, "object": ...}) with the validators that the npm package
// kubernetes-models generates from the upstream Kubernetes OpenAPI spec, and
// @kubernetes-models/prometheus-operator from the Prometheus Operator CRDs (ServiceMonitor).
// They check types, enums, formats and required fields of every field Kubernetes defines, but
// not unknown fields (the generated schemas allow additional properties); k8s_check.py's closed
// subset covers those. Offline: the packages are installed beforehand (scripts/setup.sh) into
// NPM_DIR, given as the only argument.
//   node upstream_schema.mjs NPM_DIR < objects.json
// Exit status: 0 valid, 1 invalid (one line per problem), 77 packages missing.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const npmDir = process.argv[2];
const modules = join(npmDir ?? "", "node_modules");
const core = join(modules, "kubernetes-models");
const prometheus = join(modules, "@kubernetes-models", "prometheus-operator");
if (!npmDir || !existsSync(core) || !existsSync(prometheus)) {
  console.log(`npm packages kubernetes-models and @kubernetes-models/prometheus-operator are not ` +
              `installed under ${modules}`);
  process.exit(77);
}

// apiVersion "v1" -> kubernetes-models/v1/KIND.js; "group/version" -> .../group/version/KIND.js.
function modulePath(apiVersion, kind) {
  const root = apiVersion.startsWith("monitoring.coreos.com/") ? prometheus : core;
  return join(root, ...apiVersion.split("/"), `${kind}.js`);
}

const items = JSON.parse(readFileSync(0, "utf8"));
let problems = 0;
const seen = [];
for (const { source, object } of items) {
  const id = `${source}: ${object.kind}/${object.metadata?.name}`;
  const path = modulePath(String(object.apiVersion), String(object.kind));
  if (!existsSync(path)) {
    console.log(`ERROR ${id}: no upstream model for apiVersion ${object.apiVersion} kind ${object.kind}`);
    problems++;
    continue;
  }
  const Model = (await import(pathToFileURL(path).href))[object.kind];
  try {
    new Model(object).validate();
    seen.push(id);
  } catch (error) {
    console.log(`ERROR ${id}: ${error.message}`);
    problems++;
  }
}
console.log(`upstream schema: ${seen.length} valid, ${problems} invalid`);
process.exit(problems ? 1 : 0);
