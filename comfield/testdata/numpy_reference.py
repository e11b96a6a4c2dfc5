"""Writes the numpy reference of comfield's products (TestNumpyReference): a random
CoM shift field, shape (9, 12, 2) float64 (y, x), and its products after
flip_y and a scan rotation of 25 degrees, computed with numpy alone: LiberTEM's
apply_correction matrices, numpy.gradient, and the Fourier integration of
LiberTEM-iCoM's iDPC with numpy.fft.fftfreq frequencies.

    python comfield/testdata/numpy_reference.py   # from the repository root
"""

import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(18)
shifts = rng.normal(size=(9, 12, 2))
theta = np.deg2rad(25)
rotate = np.array([(np.cos(theta), np.sin(theta)), (-np.sin(theta), np.cos(theta))])
flip = np.array([(-1, 0), (0, 1)])
y, x = (rotate @ flip) @ shifts.reshape(-1, 2).T
y, x = y.reshape(9, 12), x.reshape(9, 12)
magnitude = np.sqrt(y**2 + x**2)
divergence = np.gradient(y, axis=0) + np.gradient(x, axis=1)
curl = np.gradient(y, axis=1) - np.gradient(x, axis=0)
ky, kx = np.fft.fftfreq(9)[:, None], np.fft.fftfreq(12)[None, :]
k2 = kx**2 + ky**2
k2[0, 0] = 1
spectrum = (kx * np.fft.fft2(x) + ky * np.fft.fft2(y)) / (2j * np.pi * k2)
spectrum[0, 0] = 0
icom = np.real(np.fft.ifft2(spectrum))
np.save(os.path.join(here, "shifts.npy"), shifts)
np.save(os.path.join(here, "products.npy"), np.stack([y, x, magnitude, divergence, curl, icom]))
