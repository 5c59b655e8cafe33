"""The numpy bitserial reference against plain integer math on unpacked values (np.int64)."""
import numpy as np
import pytest

from edge_sdk.quant import bitserial as bs

RNG = np.random.default_rng(20240604)
BITS = [(1, 1), (2, 1), (3, 1), (1, 2), (2, 2)]  # (activation bits, weight bits)


def test_bitpack_is_lsb_first():
    p = bs.bitpack(np.array([1, 0, 1, 1, 0, 0, 0, 0, 1]), bits=1, pack_axis=0, bit_axis=1, word="uint8")
    assert p.dtype == np.uint8 and p.shape == (2, 1)
    assert p[:, 0].tolist() == [0b1101, 0b1]


def test_bitpack_planes():
    p = bs.bitpack(np.array([[3, 2, 1]]), bits=2, pack_axis=1, bit_axis=2, word="uint16")
    assert p.shape == (1, 1, 2)
    assert p[0, 0].tolist() == [0b101, 0b011]  # plane 0 = low bits, plane 1 = high bits


@pytest.mark.parametrize("word", list(bs.WORD_BITS))
def test_bitpack_roundtrip_any_axis(word):
    x = RNG.integers(0, 8, (3, 5, 70))
    for pack_axis in range(3):
        for bit_axis in range(4):
            p = bs.bitpack(x, bits=3, pack_axis=pack_axis, bit_axis=bit_axis, word=word)
            assert p.dtype == np.dtype(word) and p.shape[bit_axis] == 3
            back = bs.bitunpack(p, length=x.shape[pack_axis], pack_axis=pack_axis, bit_axis=bit_axis)
            np.testing.assert_array_equal(back, x)


def test_bitpack_rejects_out_of_range_codes():
    with pytest.raises(ValueError, match="0..3"):
        bs.bitpack(np.array([4]), bits=2, pack_axis=0, bit_axis=1)
    with pytest.raises(ValueError, match="word type"):
        bs.bitpack(np.array([1]), bits=1, pack_axis=0, bit_axis=1, word="uint7")


@pytest.mark.parametrize("mode", bs.MODES)
@pytest.mark.parametrize("a_bits,w_bits", BITS)
@pytest.mark.parametrize("k,stride,padding", [(3, 1, 1), (3, 2, 1), (3, 2, (0, 1, 1, 0)), (1, 1, 0), (1, 2, 0), (3, 1, 0)])
def test_conv2d_matches_integer_conv(mode, a_bits, w_bits, k, stride, padding):
    a = RNG.integers(0, 1 << a_bits, (2, 7, 9, 37))  # 37 channels: partial words everywhere
    w = RNG.integers(0, 1 << w_bits, (k, k, 37, 5))
    got = bs.bitserial_conv2d_nhwc(a, w, a_bits=a_bits, w_bits=w_bits, mode=mode, stride=stride,
                                   padding=padding, word="uint8")
    av, wv = bs.reference_values(a, w, a_bits=a_bits, w_bits=w_bits, mode=mode)
    np.testing.assert_array_equal(got, bs.conv2d_nhwc_int(av, wv, stride=stride, padding=padding))


def test_bipolar_padding_is_zero_valued():
    """All-(+1) activations and weights: an interior pixel sees 9*C, a corner only 4*C."""
    a = np.ones((1, 4, 4, 3), dtype=np.int64)
    w = np.ones((3, 3, 3, 1), dtype=np.int64)
    out = bs.bitserial_conv2d_nhwc(a, w, a_bits=1, w_bits=1, mode="bipolar", padding=1)
    assert out[0, 0, 0, 0] == 4 * 3 and out[0, 1, 1, 0] == 9 * 3


@pytest.mark.parametrize("mode", bs.MODES)
@pytest.mark.parametrize("a_bits,w_bits", BITS)
@pytest.mark.parametrize("word", ["uint8", "uint64"])
def test_dense_matches_integer_matmul(mode, a_bits, w_bits, word):
    a = RNG.integers(0, 1 << a_bits, (3, 100))
    w = RNG.integers(0, 1 << w_bits, (100, 7))
    got = bs.bitserial_dense(a, w, a_bits=a_bits, w_bits=w_bits, mode=mode, word=word)
    av, wv = bs.reference_values(a, w, a_bits=a_bits, w_bits=w_bits, mode=mode)
    np.testing.assert_array_equal(got, bs.dense_int(av, wv))


def test_weight_values():
    assert bs.code_values(np.arange(2), bits=1, signed=True).tolist() == [-1, 1]
    assert bs.code_values(np.arange(4), bits=2, signed=True).tolist() == [-3, -1, 1, 3]
    assert bs.code_values(np.arange(4), bits=2, signed=False).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("bits", [1, 2])
def test_quantize_weights_reconstructs(bits):
    w = RNG.normal(size=(3, 3, 16, 8))
    u, s = bs.quantize_weights(w, bits=bits)
    approx = s * bs.code_values(u, bits=bits, signed=True)
    assert np.all(np.sign(approx) == np.where(w >= 0, 1, -1))
    # the 2-bit grid is finer: its error is smaller than the 1-bit one
    err = np.mean((approx - w) ** 2)
    assert err < (0.4 if bits == 1 else 0.15)


def test_quantize_weights_rejects_3_bits():
    with pytest.raises(ValueError, match="3-bit weights"):
        bs.quantize_weights(np.ones((2, 2)), bits=3)


def test_quantize_activations_clips():
    q = bs.quantize_activations(np.array([-1.0, 0.24, 0.26, 0.74, 5.0]), bits=2, step=0.5)
    assert q.tolist() == [0, 0, 1, 1, 3]
