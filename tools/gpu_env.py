#!/usr/bin/env python3
"""The environment to run tinygrad's NVIDIA backends with (`make test-gpu`, tools/gpu_check.sh): CUDA=1 needs the driver's libcuda and the
toolkit's runtime compiler libnvrtc, NV=1 libnvrtc. tinygrad looks in the system's library directories and /usr/local/cuda; toolkits
also live in /usr/local/cuda-X.Y, /opt/cuda, pip's nvidia-*-cu* wheels and LD_LIBRARY_PATH. Prints `export NVRTC_PATH=...` (the
variables tinygrad reads, `<LIB>_PATH`, a file) for a library found only there; exits 1 saying which variable to set when one isn't
found at all.

  eval "$(python3 tools/gpu_env.py CUDA)"
"""
import glob, os, site, sys
from pathlib import Path

def candidates(lib:str) -> list[str]:
  dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
  dirs += sorted(glob.glob("/usr/local/cuda*/targets/*/lib"), reverse=True) + sorted(glob.glob("/usr/local/cuda*/lib64"), reverse=True)
  dirs += ["/opt/cuda/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib"]
  for sp in site.getsitepackages() + [site.getusersitepackages()]: dirs += sorted(glob.glob(f"{sp}/nvidia/*/lib"))
  return [f for d in dirs for f in sorted(glob.glob(f"{d}/lib{lib}.so*"), key=len) if Path(f).is_file()]

def main(backend:str) -> int:
  from tinygrad.runtime.support.c import DLL
  need = {"CUDA": [("cuda", "the NVIDIA driver"), ("nvrtc", "the CUDA toolkit")], "NV": [("nvrtc", "the CUDA toolkit")]}.get(backend)
  if need is None: print(f"gpu_env: no NVIDIA backend {backend!r} (CUDA or NV)", file=sys.stderr); return 2
  ok = True
  for lib, what in need:
    var = f"{lib.upper()}_PATH"
    if os.environ.get(var) and Path(os.environ[var]).is_file(): continue
    extra = ["/usr/local/cuda/targets/x86_64-linux/lib"] if lib == "nvrtc" else []
    if DLL.findlib(lib, [lib], extra): continue   # where tinygrad looks by itself
    if found := candidates(lib): print(f"export {var}={found[0]}")
    else:
      print(f"gpu_env: lib{lib}.so ({what}) is not where CUDA installs put it: set {var} to its path (export {var}=/path/to/lib{lib}.so)",
            file=sys.stderr)
      ok = False
  return 0 if ok else 1

if __name__ == "__main__": sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "CUDA"))
