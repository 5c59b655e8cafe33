"""The digits accuracy nets (edge_sdk/bench/accuracy.py) compile with the zoo bitserial variants' stem, so a
digits accuracy is of the same net the demo and bench price; the float32 training stem stays selectable."""
import pytest

from edge_sdk.bench import accuracy as digits
from edge_sdk.variants import get_variant

pytest.importorskip("tvm")


def test_digits_nets_take_the_zoo_variants_stem():
    assert digits.STEM == get_variant("w1a2").stem == get_variant("w1a1").stem == "int8"
    assert digits.binarized_net("w1a2").stem.integer
    assert digits.binarized_net("w1a1").stem.integer


def test_float_stem_stays_selectable():
    assert get_variant("w1a2-float-stem").stem == "float32"
    assert not digits.binarized_net("w1a2", stem="float32").stem.integer
