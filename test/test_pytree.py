"""tinygrad.pytree: the trees vmap, jvp and the Jacobians take (vmap's in_axes/out_axes as prefix specs, their errors in test_vmap_api)"""
import unittest, collections
from tinygrad.pytree import tree_map, tree_map_skip_none, tree_leaves, tree_unflatten, tree_structure, same_structure

NT = collections.namedtuple("NT", "a b")

class TestPytree(unittest.TestCase):
  def test_leaves_and_unflatten(self):
    tree = (1, [2, None], {"b": 3, "a": (4,)}, NT(5, 6))
    self.assertEqual(tree_leaves(tree), [1, 2, None, 3, 4, 5, 6])   # None is a leaf, a dict's leaves in its key order
    self.assertEqual(tree_unflatten(tree, list("abcdefg")), ("a", ["b", "c"], {"b": "d", "a": ("e",)}, NT("f", "g")))
  def test_node_types_kept(self):
    od, dd = collections.OrderedDict(x=1, y=2), collections.defaultdict(list, x=1)
    self.assertIs(type(tree_unflatten(od, [3, 4])), collections.OrderedDict)
    self.assertEqual(tree_unflatten(dd, [5]).default_factory, list)
    self.assertIsInstance(tree_unflatten(NT(1, 2), [3, 4]), NT)
  def test_prefix_spec(self):
    got = tree_map(lambda leaf, spec, path: (leaf, spec, path), ({"w": 1, "b": 2}, [3]), ({"b": None, "w": 0}, 1), "x")
    self.assertEqual(got, ({"w": (1, 0, "x[0]['w']"), "b": (2, None, "x[0]['b']")}, [(3, 1, "x[1][0]")]))
  def test_spec_errors(self):
    with self.assertRaisesRegex(ValueError, r"has a structure the value doesn't have: x is a int"): tree_map(print, 1, (0,), "x", "s")
    with self.assertRaisesRegex(ValueError, r"s for x has keys \['b'\], but the value has keys \['a'\]"):
      tree_map(print, {"a": 1}, {"b": 0}, "x", "s")
    with self.assertRaisesRegex(ValueError, "s for x has 1 entries, but the value has 2"): tree_map(print, (1, 2), (0,), "x", "s")
    with self.assertRaisesRegex(TypeError, "s must be an int, None"): tree_map(print, 1, True, "x", "s")
    with self.assertRaisesRegex(TypeError, "s entries must be an int, None"): tree_map(print, 1, 1.5, "x", "s")
  def test_skip_none(self):
    self.assertEqual(tree_map_skip_none(lambda x: x*2, (1, None, {"a": 3})), (2, None, {"a": 6}))
  def test_structure(self):
    self.assertEqual(tree_structure((1, {"w": [2]})), "tuple(int, dict{'w': list(int)})")
    self.assertTrue(same_structure((1, [2]), (3, [None])))   # None a leaf
    self.assertTrue(same_structure({"a": 1, "b": 2}, {"b": 1, "a": 2}))
    self.assertFalse(same_structure((1, 2), (1,)))
    self.assertFalse(same_structure({"a": 1}, (1,)))
    self.assertFalse(same_structure((1,), (None, None)))
    self.assertFalse(same_structure([1], [[1]]))
  def test_structure_node_types(self):
    # as JAX's treedefs compare: a tuple isn't a list, nor a namedtuple, nor a dict an OrderedDict
    self.assertFalse(same_structure((1, [2]), [3, (4,)]))
    self.assertFalse(same_structure((1, 2), NT(1, 2)))
    self.assertFalse(same_structure({"a": 1}, collections.OrderedDict(a=1)))
    self.assertTrue(same_structure(NT(1, (2,)), NT(3, (4,))))
  def test_spec_node_type_must_match(self):
    # as JAX's prefix rule: a spec's node is the value's node type, else ValueError naming the path
    for value, spec in (([1, 2], (0, None)), ((1, 2), [0, None]), (NT(1, 2), (0, None)), (collections.OrderedDict(a=1), {"a": 0})):
      with self.subTest(spec=spec), self.assertRaisesRegex(ValueError, "has a structure the value doesn't have: x is a"):
        tree_map(print, value, spec, "x", "s")
    self.assertEqual(tree_map(lambda l, s, p: s, NT(1, 2), NT(0, None), "x"), NT(0, None))

if __name__ == "__main__":
  unittest.main()
