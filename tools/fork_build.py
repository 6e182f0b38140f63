"""PEP 517 build backend for `pip install .`: materialize pristine upstream + patches/ into tinygrad/, then build with setuptools."""
from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 (the hooks this backend does not wrap)
import fork

def _materialize():
  if not fork.is_default_line(fork.ROOT):   # the wheel's version names the default line (pyproject.toml's [project] version)
    raise SystemExit(f"tinygrad-vmap build: `pip install .` builds the default upstream line, {fork.fork_config(fork.ROOT)['default']}; "
                     f"unset UPSTREAM (a {fork.upstream_line(fork.ROOT)} wheel comes when that line becomes the default)")
  try: fork.cmd_fork(fork.ROOT)
  except fork.ForkError as e: raise SystemExit(f"tinygrad-vmap build: {e}") from None

def build_wheel(*args, **kwargs): _materialize(); return _setuptools.build_wheel(*args, **kwargs)
def build_editable(*args, **kwargs): _materialize(); return _setuptools.build_editable(*args, **kwargs)
def build_sdist(*args, **kwargs): _materialize(); return _setuptools.build_sdist(*args, **kwargs)
