// Validates Kubernetes manifests offline against the API's OpenAPI schemas
// (kubernetes-models: types, enums, required fields) and checks the
// settings a gateway DaemonSet cannot work without. kubectl's
// --dry-run=client still asks an API server for its resource list, and the
// test machines have none. Usage: node validate-manifests.mjs FILE...
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { Namespace, ConfigMap } from "kubernetes-models/v1";
import { DaemonSet } from "kubernetes-models/apps/v1";

const models = { "v1/Namespace": Namespace, "v1/ConfigMap": ConfigMap, "apps/v1/DaemonSet": DaemonSet };
const problems = [];
const fail = (where, what) => problems.push(`${where}: ${what}`);

function checkDaemonSet(where, ds) {
  const pod = ds.spec.template.spec;
  const annotations = ds.spec.template.metadata.annotations ?? {};
  if (!pod.hostNetwork) fail(where, "hostNetwork must be true (programs attach to the node's interfaces)");
  const volumes = Object.fromEntries((pod.volumes ?? []).map((v) => [v.name, v]));
  const all = [...(pod.initContainers ?? []), ...pod.containers];
  for (const c of all) {
    const apparmor = annotations[`container.apparmor.security.beta.kubernetes.io/${c.name}`];
    if (apparmor !== "unconfined") fail(where, `${c.name}: AppArmor must be unconfined (runtime profiles deny /sys/fs/bpf writes)`);
    for (const m of c.volumeMounts ?? []) {
      const v = volumes[m.name];
      if (!v) fail(where, `${c.name}: mount of unknown volume ${m.name}`);
      if (m.mountPropagation === "Bidirectional" && !c.securityContext?.privileged)
        fail(where, `${c.name}: Bidirectional propagation is only allowed in privileged containers`);
    }
  }
  const bpffsMounts = all.flatMap((c) => (c.volumeMounts ?? []).filter((m) => m.mountPath === "/sys/fs/bpf").map((m) => [c, m]));
  if (!bpffsMounts.some(([, m]) => m.mountPropagation === "Bidirectional"))
    fail(where, "no container mounts the host's bpffs with Bidirectional propagation");
  for (const [c, m] of bpffsMounts) {
    if (volumes[m.name]?.hostPath?.path !== "/sys/fs/bpf") fail(where, `${c.name}: /sys/fs/bpf is not the host's bpffs`);
    if (!m.mountPropagation) fail(where, `${c.name}: /sys/fs/bpf without mount propagation`);
  }
  const daemon = pod.containers.find((c) => c.name === "roceguard");
  if (!daemon) return fail(where, "no container named roceguard");
  const args = [...(daemon.command ?? []), ...(daemon.args ?? [])];
  const flag = args.indexOf("--metrics-listen");
  const listen = flag < 0 ? "" : args[flag + 1] ?? "";
  if (!listen.startsWith("$(NODE_IP):")) fail(where, `metrics must listen on the node's address, not ${listen || "the default"}`);
  const nodeIp = (daemon.env ?? []).find((e) => e.name === "NODE_IP");
  if (nodeIp?.valueFrom?.fieldRef?.fieldPath !== "status.hostIP") fail(where, "NODE_IP must come from status.hostIP");
  const healthFlag = args.indexOf("--health-listen");
  const health = healthFlag < 0 ? "" : args[healthFlag + 1] ?? "";
  if (!health.startsWith("$(NODE_IP):")) fail(where, `probes must listen on the node's address, not ${health || "nowhere"}`);
  const healthPort = (daemon.ports ?? []).find((p) => p.name === "health");
  if (String(healthPort?.containerPort) !== health.slice("$(NODE_IP):".length))
    fail(where, `the port named health must be the --health-listen port ${health}`);
  const paths = { livenessProbe: "/livez", readinessProbe: "/readyz", startupProbe: "/livez" };
  for (const [probe, path] of Object.entries(paths)) {
    const get = daemon[probe]?.httpGet;
    if (get?.path !== path || get?.port !== "health")
      fail(where, `${probe} must GET ${path} on the port named health (not a /metrics scrape, not the scrape server)`);
  }
  if (!daemon.resources?.requests || !daemon.resources?.limits?.memory) fail(where, "resources need requests and a memory limit");
  const caps = daemon.securityContext?.capabilities ?? {};
  if (JSON.stringify(caps.drop) !== '["ALL"]' || JSON.stringify([...(caps.add ?? [])].sort()) !== '["NET_ADMIN","SYS_ADMIN"]')
    fail(where, "capabilities must be drop ALL, add NET_ADMIN and SYS_ADMIN (packaging/roceguard.service)");
}

let objects = 0;
for (const file of process.argv.slice(2)) {
  for (const [i, doc] of parseAllDocuments(readFileSync(file, "utf8")).entries()) {
    if (doc.errors.length) { fail(`${file}#${i}`, doc.errors.map(String).join("; ")); continue; }
    const obj = doc.toJS();
    if (obj === null) continue;
    const where = `${file}#${i} ${obj.kind}/${obj.metadata?.name}`;
    const Model = models[`${obj.apiVersion}/${obj.kind}`];
    if (!Model) { fail(where, `no schema for ${obj.apiVersion} ${obj.kind}`); continue; }
    try { new Model(obj).validate(); } catch (e) { fail(where, e.message); }
    if (obj.kind === "DaemonSet") checkDaemonSet(where, obj);
    objects++;
  }
}
for (const p of problems) console.error(p);
console.log(`${objects} objects, ${problems.length} problems`);
process.exit(problems.length || objects === 0 ? 1 : 0);
