# Sourced by the `megatron` label's scripts: sets `venv` to ci/megatron-env's environment, or
# SKIPs the test (exit 77, CTest's SKIP_RETURN_CODE) saying why; never creates it. One intra-op
# thread: CTest runs two tests at once on two cores, and torch's default of one thread per core
# oversubscribes them.
venv="${PARITY_CACHE:-/var/cache/parity}/megatron-venv"
if ! ls "$venv"/.parity-megatron-core-* >/dev/null 2>&1; then
  echo "SKIP: no Megatron Core environment at $venv (run ci/megatron-env to create it)"
  exit 77
fi
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
