#!/usr/bin/env bash
# Validates the Kubernetes manifests offline (validate-manifests.mjs: the
# API's schemas plus the settings a gateway needs), and checks that the
# validator does reject a broken DaemonSet. Installs the validator's two npm
# packages, pinned, into NODE_DIR on first use (needs the npm registry).
# Usage: manifests_test.sh SOURCE_DIR NODE_DIR
set -euo pipefail
src=$1 node_dir=$2
here=$(dirname "$(realpath "$0")")

mkdir -p "$node_dir"
if [ ! -d "$node_dir/node_modules/kubernetes-models" ] || [ ! -d "$node_dir/node_modules/yaml" ]; then
  npm install --prefix "$node_dir" --no-audit --no-fund --silent kubernetes-models@5.1.0 yaml@2.9.1
fi
cp "$here/validate-manifests.mjs" "$node_dir/"
validate() { node "$node_dir/validate-manifests.mjs" "$@"; }

validate "$src"/packaging/k8s/*.yaml

broken=$(mktemp)
trap 'rm -f "$broken"' EXIT
# A type error the schema catches, and a probe back on /metrics.
sed -e 's/periodSeconds: 2$/periodSeconds: two/' -e '0,/path: \/livez/s//path: \/metrics/' \
  "$src/packaging/k8s/daemonset.yaml" >"$broken"
if out=$(validate "$broken" 2>&1); then
  echo "the validator accepted a broken DaemonSet:" >&2
  echo "$out" >&2
  exit 1
fi
echo "a broken DaemonSet is refused:"
echo "$out"
