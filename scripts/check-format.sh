#!/usr/bin/env bash
# Fails when a C++ file does not follow .clang-format (fix with: clang-format -i FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=()
while IFS= read -r f; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [[ ${#bad[@]} -gt 0 ]]; then
  printf 'not formatted (run clang-format -i): %s\n' "${bad[@]}"
  exit 1
fi
echo "format: $(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | wc -l) files follow .clang-format"
