"""A small MLP on scikit-learn's 1,797 real 8x8 digits: fast enough for tests, still a real learning curve."""

import numpy as np
from mxnet import gluon


def build_model():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.hybridize()
    return net


def load_data():
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.RandomState(7).permutation(len(digits.data))
    x = (digits.data[order] / 16.0).astype("float32")
    y = digits.target[order].astype("float32")
    return x[:1400], y[:1400], x[1400:], y[1400:]
