#!/usr/bin/env bash
# Validates the Kubernetes manifests offline (validate-manifests.mjs: the
# API's schemas, the Prometheus Operator CRDs' schemas in data/, plus the
# settings a gateway needs and the monitoring objects' agreement with the
# DaemonSet, the rules file and the dashboard), checks that the generated
# ones are what packaging/k8s/gen-manifests.sh writes from their sources,
# and checks that both checks do reject broken manifests. Installs the
# validator's npm packages, pinned, into NODE_DIR on first use (needs the
# npm registry).
# Usage: manifests_test.sh SOURCE_DIR NODE_DIR
set -euo pipefail
src=$1 node_dir=$2
here=$(dirname "$(realpath "$0")")

mkdir -p "$node_dir"
if [ ! -d "$node_dir/node_modules/kubernetes-models" ] || [ ! -d "$node_dir/node_modules/yaml" ] ||
   [ "$(node -p 'require(process.argv[1]).version' "$node_dir/node_modules/ajv/package.json" 2>/dev/null)" != 8.20.0 ]; then
  npm install --prefix "$node_dir" --no-audit --no-fund --silent kubernetes-models@5.1.0 yaml@2.9.1 ajv@8.20.0
fi
cp "$here/validate-manifests.mjs" "$node_dir/"
validate() {
  node "$node_dir/validate-manifests.mjs" --crd-schemas "$here/data" \
    --rules "${rules:-$src/packaging/prometheus/roceguard-rules.yml}" --dashboard "$src/grafana/roceguard.json" "$@"
}
# refused WHAT COMMAND...: COMMAND must fail.
refused() {
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then
    echo "accepted $what:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "$what is refused:"
  echo "$out"
}

k8s=$src/packaging/k8s
validate "$k8s"/*.yaml
"$k8s/gen-manifests.sh" --check "$src"
echo "the generated manifests are up to date"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A type error the schema catches, and a probe back on /metrics.
sed -e 's/periodSeconds: 2$/periodSeconds: two/' -e '0,/path: \/livez/s//path: \/metrics/' \
  "$k8s/daemonset.yaml" >"$tmp/daemonset.yaml"
refused "a broken DaemonSet" validate "$tmp/daemonset.yaml"

# A PodMonitor naming no port of the pods: Prometheus would find no target.
sed 's/- port: metrics$/- port: metric/' "$k8s/podmonitor.yaml" >"$tmp/podmonitor.yaml"
cmp -s "$k8s/podmonitor.yaml" "$tmp/podmonitor.yaml" && { echo "the port substitution changed nothing" >&2; exit 1; }
refused "a PodMonitor with a wrong port name" validate "$k8s/daemonset.yaml" "$tmp/podmonitor.yaml"
# One the CRD's schema refuses: an interval that is no duration, and a
# misspelt field.
sed -e 's/interval: 30s$/interval: 30 seconds/' -e 's/^  jobLabel:/  jobLabels:/' "$k8s/podmonitor.yaml" >"$tmp/podmonitor.yaml"
refused "a PodMonitor against the CRD's schema" validate "$k8s/daemonset.yaml" "$tmp/podmonitor.yaml"

# A PrometheusRule that is not the rules file: one alert's `for` changed in
# the source and the PrometheusRule left as it was.
sed '0,/^\( *\)for: 10m$/s//\1for: 15m/' "$src/packaging/prometheus/roceguard-rules.yml" >"$tmp/rules.yml"
cmp -s "$src/packaging/prometheus/roceguard-rules.yml" "$tmp/rules.yml" && { echo "the rules edit changed nothing" >&2; exit 1; }
rules=$tmp/rules.yml refused "a stale PrometheusRule" validate "$k8s/prometheusrule.yaml"

# The generator's check fails on a tree where a source changed and the
# manifests did not: the rules, the dashboard, the ConfigMap (whose
# checksum rolls the pods).
copy_tree() {
  rm -rf "$tmp/tree"
  mkdir -p "$tmp/tree/packaging/k8s" "$tmp/tree/packaging/prometheus" "$tmp/tree/grafana"
  cp "$k8s"/*.yaml "$tmp/tree/packaging/k8s/"
  cp "$src/packaging/prometheus/roceguard-rules.yml" "$tmp/tree/packaging/prometheus/"
  cp "$src/grafana/roceguard.json" "$tmp/tree/grafana/"
}
copy_tree
cp "$tmp/rules.yml" "$tmp/tree/packaging/prometheus/roceguard-rules.yml"
refused "a PrometheusRule older than the rules file" "$k8s/gen-manifests.sh" --check "$tmp/tree"
copy_tree
sed -i 's/"refresh": "30s"/"refresh": "1m"/' "$tmp/tree/grafana/roceguard.json"
refused "a dashboard ConfigMap older than the dashboard" "$k8s/gen-manifests.sh" --check "$tmp/tree"
copy_tree
sed -i 's/^    dscp = 46$/    dscp = 34/' "$tmp/tree/packaging/k8s/daemonset.yaml"
cmp -s "$k8s/daemonset.yaml" "$tmp/tree/packaging/k8s/daemonset.yaml" && { echo "the ConfigMap edit changed nothing" >&2; exit 1; }
refused "a ConfigMap changed without its checksum" "$k8s/gen-manifests.sh" --check "$tmp/tree"
