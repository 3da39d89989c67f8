"""The text helpers of the quantization claim's paper path (repro.data.text): perplexity windows over a token stream
(GPTQ's disjoint windows and the sliding-context recipe), seeded calibration segments, decoder-only batches."""
import numpy as np
import pytest

from repro.data.text import lm_batch, random_segments, read_lines, stride_windows, token_stream


@pytest.mark.parametrize("n,seq,stride", [(10, 4, 4), (11, 4, 4), (10, 4, 2), (10, 4, 1), (3, 8, 8), (100, 16, 5)])
def test_windows_score_each_target_once_with_enough_context(n, seq, stride):
    wins = stride_windows(n, seq, stride)
    scored = [t for _, e, f in wins for t in range(f, e)]
    assert len(scored) == len(set(scored)) and 0 not in scored  # at most once; bos is never a target
    assert all(e - b <= seq and b < f <= e for b, e, f in wins)
    assert [b for b, _, _ in wins] == list(range(0, stride * len(wins), stride))
    if stride == seq:  # GPTQ: disjoint windows, each window's first token is context only
        assert sorted(scored) == [t for t in range(1, n) if t % seq]
    else:  # every token from 1 on, each (after the first window) with at least seq - stride tokens of context
        assert sorted(scored) == list(range(1, n))
        assert all(f - b >= seq - stride for b, _, f in wins[1:])


def test_windows_reject_a_stride_longer_than_the_window():
    with pytest.raises(ValueError, match="stride"):
        stride_windows(10, 4, 5)


def test_random_segments_are_seeded_slices():
    ids = np.arange(100)
    a, b = random_segments(ids, 5, 10, seed=0), random_segments(ids, 5, 10, seed=0)
    assert all((x == y).all() for x, y in zip(a, b))
    assert all(len(x) == 10 and (np.diff(x) == 1).all() for x in a)
    assert any((x != y).any() for x, y in zip(a, random_segments(ids, 5, 10, seed=1)))
    with pytest.raises(ValueError, match="fewer than one segment"):
        random_segments(ids[:5], 1, 10, seed=0)


def test_token_stream_and_batch(tmp_path):
    class Tok:
        bos_id = 1

        def encode(self, s):
            return [ord(c) for c in s]

    f = tmp_path / "t.txt"
    f.write_text("ab\n\ncd\n", encoding="utf-8")
    assert read_lines(f) == ["ab", "cd"]
    ids = token_stream(Tok(), f)
    assert ids.tolist() == [1, 97, 98, 10, 10, 99, 100, 10]
    b = lm_batch(ids[:4])
    assert b.tgt_in.tolist() == [[1, 97, 98]] and b.tgt_out.tolist() == [[97, 98, 10]] and b.ntokens == 3
