// Validates Kubernetes manifests offline against the API's OpenAPI schemas
// (kubernetes-models: types, enums, required fields), the Prometheus
// Operator's resources against their CRDs' schemas (trimmed copies in
// tests/packaging/data, checked with ajv), and checks what the manifests
// cannot work without: the settings a gateway DaemonSet needs, a PodMonitor
// that selects its pods and names their metrics port, a PrometheusRule
// holding exactly the groups of the rules file, a dashboard ConfigMap
// holding exactly the dashboard. kubectl's --dry-run=client still asks an
// API server for its resource list, and the test machines have none.
// Usage: node validate-manifests.mjs --crd-schemas DIR --rules RULES.yml
//          --dashboard DASHBOARD.json FILE...
import { readFileSync } from "node:fs";
import { isDeepStrictEqual, parseArgs } from "node:util";
import { parse, parseAllDocuments } from "yaml";
import Ajv from "ajv";
import { Namespace, ConfigMap, ServiceAccount } from "kubernetes-models/v1";
import { DaemonSet } from "kubernetes-models/apps/v1";
import { ObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";

const { values: opts, positionals: files } = parseArgs({
  allowPositionals: true,
  options: { "crd-schemas": { type: "string" }, rules: { type: "string" }, dashboard: { type: "string" } },
});
const models = {
  "v1/Namespace": Namespace, "v1/ConfigMap": ConfigMap, "v1/ServiceAccount": ServiceAccount,
  "apps/v1/DaemonSet": DaemonSet,
};
// The CRDs' integer formats; ajv knows JSON Schema's formats only.
const ajv = new Ajv({ allErrors: true, strict: true });
ajv.addFormat("int32", { type: "number", validate: (n) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
ajv.addFormat("int64", { type: "number", validate: (n) => Number.isSafeInteger(n) });
const crds = { "monitoring.coreos.com/v1/PodMonitor": "podmonitor", "monitoring.coreos.com/v1/PrometheusRule": "prometheusrule" };
const crdSchema = (name) => {
  if (!opts["crd-schemas"]) throw new Error("--crd-schemas DIR is needed to validate it");
  return ajv.getSchema(name) ?? (ajv.addSchema(JSON.parse(readFileSync(`${opts["crd-schemas"]}/${name}.schema.json`, "utf8")), name),
    ajv.getSchema(name));
};
const problems = [];
const fail = (where, what) => problems.push(`${where}: ${what}`);

function checkDaemonSet(where, ds, all) {
  const pod = ds.spec.template.spec;
  const annotations = ds.spec.template.metadata.annotations ?? {};
  if (!pod.hostNetwork) fail(where, "hostNetwork must be true (programs attach to the node's interfaces)");
  // Its own identity, without an API token: roceguard never calls the API server.
  const account = all.find(({ obj }) => obj.kind === "ServiceAccount" && obj.metadata.name === pod.serviceAccountName &&
    obj.metadata.namespace === ds.metadata.namespace)?.obj;
  if (!pod.serviceAccountName || !account) fail(where, `serviceAccountName must name a ServiceAccount of these manifests in namespace ${ds.metadata.namespace}`);
  else if (account.automountServiceAccountToken !== false) fail(where, `ServiceAccount ${account.metadata.name} must set automountServiceAccountToken: false`);
  if (pod.automountServiceAccountToken !== false) fail(where, "the pod must set automountServiceAccountToken: false");
  if (!/^"?[0-9a-f]{64}"?$/.test(annotations["checksum/config"] ?? ""))
    fail(where, "the pod template needs the checksum/config annotation (packaging/k8s/gen-manifests.sh writes it)");
  const volumes = Object.fromEntries((pod.volumes ?? []).map((v) => [v.name, v]));
  const containers = [...(pod.initContainers ?? []), ...pod.containers];
  for (const c of containers) {
    const seccomp = c.securityContext?.seccompProfile?.type ?? pod.securityContext?.seccompProfile?.type;
    if (!["RuntimeDefault", "Unconfined"].includes(seccomp))
      fail(where, `${c.name}: seccompProfile must be set, RuntimeDefault or (where a needed call is refused) Unconfined, not ${seccomp ?? "left to the kubelet"}`);
    const apparmor = annotations[`container.apparmor.security.beta.kubernetes.io/${c.name}`];
    if (apparmor !== "unconfined") fail(where, `${c.name}: AppArmor must be unconfined (runtime profiles deny /sys/fs/bpf writes)`);
    for (const m of c.volumeMounts ?? []) {
      const v = volumes[m.name];
      if (!v) fail(where, `${c.name}: mount of unknown volume ${m.name}`);
      if (m.mountPropagation === "Bidirectional" && !c.securityContext?.privileged)
        fail(where, `${c.name}: Bidirectional propagation is only allowed in privileged containers`);
    }
  }
  const bpffsMounts = containers.flatMap((c) => (c.volumeMounts ?? []).filter((m) => m.mountPath === "/sys/fs/bpf").map((m) => [c, m]));
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

// The PodMonitor selects the DaemonSet's pods in its namespace, and each
// endpoint's port is the name of one of their ports: Prometheus otherwise
// finds no target, and nothing says so.
function checkPodMonitor(where, pm, all) {
  const namespaces = pm.spec.namespaceSelector?.any ? null : pm.spec.namespaceSelector?.matchNames ?? [pm.metadata.namespace];
  const wanted = Object.entries(pm.spec.selector.matchLabels ?? {});
  if (pm.spec.selector.matchExpressions?.length) fail(where, "matchExpressions are not checked here: select with matchLabels");
  const pods = all.filter(({ obj }) => obj.kind === "DaemonSet" && (!namespaces || namespaces.includes(obj.metadata.namespace)) &&
    wanted.length > 0 && wanted.every(([k, v]) => obj.spec.template.metadata.labels?.[k] === v));
  if (pods.length === 0) return fail(where, "selects the pods of no DaemonSet of these manifests");
  for (const ep of pm.spec.podMetricsEndpoints ?? []) {
    for (const { obj } of pods) {
      const ports = obj.spec.template.spec.containers.flatMap((c) => (c.ports ?? []).map((p) => [c, p]));
      const named = ports.find(([, p]) => p.name === ep.port);
      if (!named) { fail(where, `port ${ep.port} is no port name of DaemonSet ${obj.metadata.name}'s containers (${ports.map(([, p]) => p.name).join(", ")})`); continue; }
      const [c, p] = named;
      const args = [...(c.command ?? []), ...(c.args ?? [])];
      const listen = args[args.indexOf("--metrics-listen") + 1] ?? "";
      if (args.indexOf("--metrics-listen") < 0 || !listen.endsWith(`:${p.containerPort}`))
        fail(where, `port ${ep.port} (${p.containerPort}) is not where ${c.name} serves metrics (--metrics-listen ${listen || "unset"})`);
    }
    if ((ep.path ?? "/metrics") !== "/metrics") fail(where, `path ${ep.path}: roceguard serves /metrics only`);
  }
  if (!pm.spec.podMetricsEndpoints?.length) fail(where, "no podMetricsEndpoints");
}

// The PrometheusRule holds the rules file's groups, each group and rule
// equal to the file's.
function checkPrometheusRule(where, rule, all) {
  // Selected by the same Prometheus as the PodMonitor.
  for (const { obj } of all.filter(({ obj }) => obj.kind === "PodMonitor"))
    if (obj.metadata.labels?.release !== rule.metadata.labels?.release)
      fail(where, `release label ${rule.metadata.labels?.release} is not PodMonitor ${obj.metadata.name}'s ${obj.metadata.labels?.release}`);
  const groups = rule.spec.groups ?? [];
  const names = groups.map((g) => g.name);
  if (new Set(names).size !== names.length) fail(where, `group names must be unique (the CRD keys groups by name): ${names}`);
  if (!opts.rules) return fail(where, "--rules FILE is needed to compare it with its source");
  const source = parse(readFileSync(opts.rules, "utf8")).groups;
  const key = (r) => r.alert ? `alert ${r.alert}` : `record ${r.record}`;
  for (const g of source) {
    const mine = groups.find((x) => x.name === g.name);
    if (!mine) { fail(where, `group ${g.name} of ${opts.rules} is missing`); continue; }
    const { rules: srcRules, ...srcRest } = g;
    const { rules: myRules, ...myRest } = mine;
    if (!isDeepStrictEqual(srcRest, myRest)) fail(where, `group ${g.name}'s settings differ from ${opts.rules}`);
    for (const r of srcRules) {
      const same = (myRules ?? []).filter((x) => key(x) === key(r));
      if (same.length === 0) fail(where, `group ${g.name}: ${key(r)} of ${opts.rules} is missing`);
      else if (!same.some((x) => isDeepStrictEqual(x, r))) fail(where, `group ${g.name}: ${key(r)} differs from ${opts.rules} (run packaging/k8s/gen-manifests.sh)`);
    }
    for (const r of myRules ?? [])
      if (!srcRules.some((x) => key(x) === key(r))) fail(where, `group ${g.name}: ${key(r)} is not in ${opts.rules}`);
    if (!isDeepStrictEqual(groups.find((x) => x.name === g.name), g)) fail(where, `group ${g.name} is not the one of ${opts.rules} (order or content)`);
  }
  for (const n of names) if (!source.some((g) => g.name === n)) fail(where, `group ${n} is not in ${opts.rules}`);
}

// The dashboard ConfigMap holds the dashboard file as it is, under the
// label Grafana's sidecar looks for.
function checkDashboardConfigMap(where, cm) {
  if (cm.metadata.labels?.grafana_dashboard !== "1") fail(where, 'needs the label grafana_dashboard: "1" (Grafana\'s sidecar)');
  const keys = Object.keys(cm.data ?? {});
  if (keys.length !== 1 || !keys[0].endsWith(".json")) return fail(where, `must hold one dashboard, NAME.json (has ${keys})`);
  if (!opts.dashboard) return fail(where, "--dashboard FILE is needed to compare it with its source");
  if (cm.data[keys[0]] !== readFileSync(opts.dashboard, "utf8"))
    fail(where, `${keys[0]} is not ${opts.dashboard} as it is (run packaging/k8s/gen-manifests.sh)`);
}

const all = [];
for (const file of files) {
  for (const [i, doc] of parseAllDocuments(readFileSync(file, "utf8")).entries()) {
    if (doc.errors.length) { fail(`${file}#${i}`, doc.errors.map(String).join("; ")); continue; }
    const obj = doc.toJS();
    if (obj === null) continue;
    const where = `${file}#${i} ${obj.kind}/${obj.metadata?.name}`;
    const type = `${obj.apiVersion}/${obj.kind}`;
    const Model = models[type];
    try {
      if (Model) {
        new Model(obj).validate();
      } else if (crds[type]) {
        new ObjectMeta(obj.metadata ?? {}).validate();
        const validate = crdSchema(crds[type]);
        if (!validate(obj))
          throw new Error(validate.errors.map((e) => `${obj.kind}${e.instancePath} ${e.message}` +
            (e.params.additionalProperty ? ` (${e.params.additionalProperty})` : "")).join("; "));
      } else {
        fail(where, `no schema for ${obj.apiVersion} ${obj.kind}`);
        continue;
      }
    } catch (e) {
      fail(where, e.message);
    }
    all.push({ where, obj });
  }
}
// Also on objects the schema refused, so that every problem is reported
// at once; an object too broken to check is one more problem.
for (const { where, obj } of all) {
  try {
    if (obj.kind === "DaemonSet") checkDaemonSet(where, obj, all);
    if (obj.kind === "PodMonitor") checkPodMonitor(where, obj, all);
    if (obj.kind === "PrometheusRule") checkPrometheusRule(where, obj, all);
    if (obj.kind === "ConfigMap" && obj.metadata?.labels?.grafana_dashboard !== undefined) checkDashboardConfigMap(where, obj);
  } catch (e) {
    fail(where, `cannot be checked: ${e.message}`);
  }
}
const objects = all.length;
for (const p of problems) console.error(p);
console.log(`${objects} objects, ${problems.length} problems`);
process.exit(problems.length || objects === 0 ? 1 : 0);
