"""Cosines do not depend on the vectors' scale: ``similarity`` / ``cosine_matrix`` / ``unit_rows`` divide
each row by its largest magnitude before the norm, so rows near 1e30 (whose squared norm overflows
float32), near 1e-30 (whose squares underflow), past float32's range (float64) or float16 rows past 256
give the exact cosines. Exact expected values, tight tolerances."""

from __future__ import annotations

import numpy as np
import pytest

from edgebert.errors import DataError
from edgebert.runtime import EdgeSession
from edgebert.runtime.vector_pooling import cosine_matrix, unit_rows

A = np.array([[3.0, 4.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
B = np.array([[4.0, 3.0, 0.0], [1.0, 1.0, 0.0]])
# 3-4-5 triangles: cos = 24/25; 3/5; 4/5; 1/sqrt(2); 7/(5 sqrt(2)); a zero row scores 0
EXPECTED = np.array([[24 / 25, 7 / (5 * np.sqrt(2))], [4 / 5, 1 / np.sqrt(2)], [0.0, 0.0]])
SCALES = [(1e30, np.float32), (1e-30, np.float32), (1e-40, np.float64), (1e300, np.float64), (1e-300, np.float64),
          (1e3, np.float16), (2.0 ** -14, np.float16)]   # float16: 3, 4 and 1 times these are exact


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    from runtime_fixtures import tiny_bundle

    return EdgeSession(tiny_bundle(tmp_path_factory.getbasetemp(), "embed")[1], provider="cpu", precision="fp32")


@pytest.mark.parametrize("scale, dtype", SCALES, ids=[f"{s:g}-{np.dtype(d).name}" for s, d in SCALES])
def test_similarity_of_scaled_vectors_is_the_exact_cosine(session, scale, dtype):
    a = (A * scale).astype(dtype)
    assert np.abs(a).max() > 0 and np.isfinite(a).all()                 # the scaled input itself is representable
    got = session.similarity(a, B.astype(dtype))
    assert got.dtype == np.float32 and got.shape == (3, 2)
    np.testing.assert_allclose(got, EXPECTED, rtol=0, atol=2e-7)
    np.testing.assert_allclose(session.similarity(B, a), EXPECTED.T, rtol=0, atol=2e-7)
    np.testing.assert_allclose(session.similarity(a[0], a[0]), [[1.0]], rtol=0, atol=2e-7)


@pytest.mark.parametrize("scale, dtype", SCALES, ids=[f"{s:g}-{np.dtype(d).name}" for s, d in SCALES])
def test_unit_rows_and_cosine_matrix_of_scaled_rows(scale, dtype):
    a = (A * scale).astype(dtype)
    rows = unit_rows(a)
    assert rows.dtype == np.promote_types(dtype, np.float32)
    np.testing.assert_allclose(np.linalg.norm(rows.astype(np.float64), axis=1), [1.0, 1.0, 0.0], rtol=0, atol=2e-7)
    np.testing.assert_allclose(rows[0], [0.6, 0.8, 0.0], rtol=0, atol=2e-7)
    np.testing.assert_allclose(cosine_matrix(a, (B * scale).astype(dtype)), EXPECTED, rtol=0, atol=2e-7)


def test_non_finite_vectors_are_refused(session):
    with pytest.raises(DataError, match=r"similarity\(\): b holds NaN or infinite values"):
        session.similarity(A, np.array([1.0, np.inf, 0.0]))
