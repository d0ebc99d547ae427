"""The DL2 actor-critic network on MXNet Gluon, which training updates.

Two dense layers per path, shared by every job of the window (so the window may be any size, and a job's score
does not depend on where it sits apart from its position feature):

    h_i    = relu(W_job x_i + W_glob g + b)        one hidden vector per job (x_i its row, g the globals)
    s_ik   = w_score_k . h_i + c_k                   the score of action kind k for job i
    z      = relu(W_head [mean_i h_i, max_i h_i, g] + b')
    stop   = w_stop . z + c',   value = w_value . z + c''

The policy is a softmax over the legal actions (the mask sets the others to -1e9), job-major (job i's kind k is
column i * kinds + k), STOP last; the value is the critic's estimate of the discounted reward to come. `kinds` is
1 for the simulator's GPU jobs (one more GPU) and 3 for Coach's own jobs (one more worker, one more server, or
both; coach.dl2.run_round); the feature widths are those of the round the network reads.
coach.dl2.numpy_net computes the same numbers in numpy, for acting (`numpy_net` copies a network there).
"""

from __future__ import annotations

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn

from coach.dl2.cluster_round import GPU_SHAPE
from coach.dl2.numpy_net import MASKED, NumpyNet
from coach.dl2.observation import Shape

HIDDEN = 32


class ActorCritic(gluon.HybridBlock):
    def __init__(self, hidden: int = HIDDEN, shape: Shape = GPU_SHAPE, **kwargs):
        super().__init__(**kwargs)
        self.hidden = hidden
        self.shape = shape
        with self.name_scope():
            self.job_dense = nn.Dense(hidden, flatten=False, in_units=shape.job_features)
            self.glob_dense = nn.Dense(hidden, use_bias=False, in_units=shape.global_features)
            self.score = nn.Dense(shape.kinds, flatten=False, in_units=hidden)
            self.head = nn.Dense(hidden, activation="relu", in_units=2 * hidden + shape.global_features)
            self.stop = nn.Dense(1, in_units=hidden)
            self.value = nn.Dense(1, in_units=hidden)

    def hybrid_forward(self, F, jobs, globs, present, mask):
        """jobs (B, W, job features), globs (B, global features), present (B, W), mask (B, W * kinds + 1) ->
        masked logits (B, W * kinds + 1) and values (B,)."""
        h = F.relu(F.broadcast_add(self.job_dense(jobs), F.expand_dims(self.glob_dense(globs), axis=1)))
        here = F.expand_dims(present, axis=2)
        h = F.broadcast_mul(h, here)  # padded jobs: zero (relu makes every real entry >= 0, so max is unharmed)
        scores = F.reshape(self.score(h), shape=(0, -1))
        mean = F.broadcast_div(F.sum(h, axis=1), F.maximum(F.sum(here, axis=1), 1.0))
        z = self.head(F.concat(mean, F.max(h, axis=1), globs, dim=1))
        logits = F.concat(scores, self.stop(z), dim=1)
        logits = logits - (1.0 - mask) * MASKED
        return logits, F.reshape(self.value(z), shape=(-1,))


def new_network(seed: int, hidden: int = HIDDEN, shape: Shape = GPU_SHAPE) -> ActorCritic:
    """A freshly initialised network (Xavier weights, zero biases), reproducible from `seed`."""
    mx.random.seed(seed)
    net = ActorCritic(hidden, shape)
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    return net


def numpy_net(net: ActorCritic) -> NumpyNet:
    """A numpy copy of `net`'s parameters, for acting and sampling fast."""
    layers = {"job_dense": net.job_dense, "glob_dense": net.glob_dense, "score": net.score, "head": net.head,
              "stop": net.stop, "value": net.value}
    arrays = {f"{name}.{kind}": getattr(dense, kind).data().asnumpy()
              for name, dense in layers.items() for kind in ("weight", "bias") if getattr(dense, kind) is not None}
    return NumpyNet.of_arrays(arrays, net.shape, "the network in training")
