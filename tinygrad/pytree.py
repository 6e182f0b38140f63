"""pytrees, after JAX's tree_util: tuples, lists and dicts (their subclasses too: namedtuples, OrderedDicts, defaultdicts), nested, around
leaves. Anything else is a leaf, None included: where vmap, jvp and the Jacobians take None as an empty subtree (as JAX does), they skip it
(`tree_map_skip_none`).

vmap's in_axes and out_axes are specs: tree prefixes of the arguments and outputs, where an int or None stands for the whole subtree
below it. A path names a place in a tree for errors, like `argument x[0]['w']`.
"""
from typing import Any, Callable

def _is_node(x) -> bool: return isinstance(x, (tuple, list, dict))

def _children(node) -> list[tuple[str, Any]]:
  """the (path step, child) pairs of a node, a dict's in its key order"""
  return [(f"[{k!r}]", v) for k,v in node.items()] if isinstance(node, dict) else [(f"[{i}]", v) for i,v in enumerate(node)]

def _rebuild(like, values:list):
  """a node of like's type holding `values` in place of its children"""
  if isinstance(like, dict):
    if type(like) is dict: return dict(zip(like.keys(), values))
    # an OrderedDict, a defaultdict (its default_factory), ...: copy() keeps the type and what its constructor would need
    ret = like.copy()
    ret.update(zip(like.keys(), values))
    return ret
  return type(like)(*values) if hasattr(like, "_fields") else type(like)(values)

def tree_map(fn:Callable, tree, spec=None, path:str="", what:str="spec"):
  """
  tree with every leaf replaced by fn(leaf, spec_for_leaf, path_of_leaf). `spec` is a tree prefix of tree: an int or None stands for the
  whole subtree below it, a tuple/list/dict has tree's structure there (a dict's entries are taken by key, in tree's key order). `path`
  names tree and `what` the spec in errors.
  """
  if isinstance(spec, bool): raise TypeError(f"{what} must be an int, None, or a (nested) tuple/list/dict of those, got {spec!r} for {path}")
  if spec is None or isinstance(spec, int):
    return _rebuild(tree, [tree_map(fn, v, spec, path+k, what) for k,v in _children(tree)]) if _is_node(tree) else fn(tree, spec, path)
  if not _is_node(spec): raise TypeError(f"{what} entries must be an int, None, or a tuple/list/dict of those, got {spec!r} for {path}")
  # as in JAX, a node of the spec must be a node of the same type: a tuple isn't a list, nor a namedtuple, nor a dict an OrderedDict
  if not _is_node(tree) or type(tree) is not type(spec):
    raise ValueError(f"{what} {spec!r} for {path} has a structure the value doesn't have: {path} is a {type(tree).__name__}"+
                     (f", not a {type(spec).__name__}" if _is_node(tree) else ""))
  if isinstance(spec, dict) and set(spec) != set(tree):
    raise ValueError(f"{what} for {path} has keys {sorted(map(str, spec))}, but the value has keys {sorted(map(str, tree))}")
  if not isinstance(spec, dict) and len(spec) != len(tree):
    raise ValueError(f"{what} for {path} has {len(spec)} entries, but the value has {len(tree)}")
  specs = [spec[k] for k in tree] if isinstance(spec, dict) else list(spec)
  return _rebuild(tree, [tree_map(fn, v, s, path+k, what) for (k,v),s in zip(_children(tree), specs)])

def tree_map_skip_none(fn:Callable, tree):
  """tree with every leaf replaced by fn(leaf), but None: an empty subtree (as in JAX), it stays None"""
  return tree_map(lambda leaf, _spec, _path: None if leaf is None else fn(leaf), tree)

def tree_leaves(tree) -> list:
  """the leaves of tree, depth first, a dict's in its key order"""
  return [leaf for _,v in _children(tree) for leaf in tree_leaves(v)] if _is_node(tree) else [tree]

def tree_leaves_as(tree, like) -> list:
  """the leaves of tree in the order of like's, a tree of the same structure (same_structure): a dict's taken by like's keys"""
  if isinstance(like, dict): return [leaf for k in like for leaf in tree_leaves_as(tree[k], like[k])]
  return [leaf for t,l in zip(tree, like) for leaf in tree_leaves_as(t, l)] if _is_node(like) else [tree]

def tree_unflatten(like, leaves:list):
  """a tree of like's structure holding `leaves` (in the order of tree_leaves)"""
  it = iter(leaves)
  return tree_map(lambda _leaf, _spec, _path: next(it), like)

def tree_structure(tree) -> str:
  """tree's structure for errors, like `tuple(Tensor, dict{'w': Tensor})`"""
  if isinstance(tree, dict): return type(tree).__name__ + "{" + ", ".join(f"{k!r}: {tree_structure(v)}" for k,v in tree.items()) + "}"
  return type(tree).__name__ + ("(" + ", ".join(tree_structure(v) for v in tree) + ")" if isinstance(tree, (tuple, list)) else "")

def same_structure(a, b) -> bool:
  """a and b are the same nodes around their leaves, as JAX's treedefs compare: nodes of the same type (a tuple isn't a list, nor a
  namedtuple), dicts with the same keys (in any order), tuples and lists of the same length"""
  if _is_node(a) or _is_node(b):
    if type(a) is not type(b): return False
    if isinstance(a, dict): return a.keys() == b.keys() and all(same_structure(a[k], b[k]) for k in a)
    return len(a) == len(b) and all(map(same_structure, a, b))
  return True
