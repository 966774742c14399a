#!/usr/bin/python3
"""Smoke run of `manyshot-bench cluster --quick --json` (tiny model, 64 shots).

The bench itself fails when the restoring replica encoded or did not restore exactly once; this
checks that it exits 0 and reports every figure as a positive number. No timing is asserted.
Exit 77 (skip) without the SST-2 files or haproxy.

    /usr/bin/python3 tests/cluster/bench_cluster_quick.py MANYSHOT_BENCH WORK_DIR
"""

import json
import os
import shutil
import subprocess
import sys

FIGURES = ["f32_encode_first_answer_seconds", "f32_restore_first_answer_seconds",
           "f32_restore_speedup", "bf16_encode_first_answer_seconds",
           "bf16_restore_first_answer_seconds", "bf16_restore_speedup", "batch1_request_ms",
           "revalidation_us", "revalidation_share_of_request", "batch1_direct_ms",
           "batch1_proxy_ms", "proxy_over_direct"]


def main():
    bench, work = sys.argv[1], sys.argv[2]
    if not os.access("/usr/sbin/haproxy", os.X_OK):
        print("SKIP: haproxy is not installed")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    result = subprocess.run([bench, "cluster", "--quick", "--json", "--threads=1", "--repeats=1",
                             "--requests=8", f"--work_dir={work}"],
                            capture_output=True, text=True, timeout=600, check=False)
    if "stsa.binary" in result.stderr and result.returncode != 0:
        print(f"SKIP: no SST-2 files: {result.stderr.strip()}")
        return 77
    if result.returncode != 0:
        print(f"FAIL: exit {result.returncode}\n{result.stderr}", file=sys.stderr)
        return 1
    report = json.loads(result.stdout)
    errors = [f"{name}: {report.get(name)!r}" for name in FIGURES
              if not isinstance(report.get(name), (int, float)) or report[name] <= 0]
    if report.get("shape") != "tiny" or report.get("shots") != 64:
        errors.append(f"--quick ran shape {report.get('shape')!r} with {report.get('shots')} shots")
    for message in errors:
        print(f"FAIL: {message}", file=sys.stderr)
    if errors:
        print(f"--- the bench's stderr:\n{result.stderr}", file=sys.stderr)
    if not errors:
        print(f"ok: {len(FIGURES)} figures, e.g. f32_restore_speedup "
              f"{report['f32_restore_speedup']:.1f}")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
