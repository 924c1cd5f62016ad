"""Training graphs of real architectures, sized from their layer shapes.

Each function builds the forward graph of a published architecture at operator
granularity (every convolution, normalisation, activation, pooling, residual
add and concatenation is its own node) and turns it into a training graph with
`training_graph` (Checkmate's rule, Jain et al. 2020).

Sizes and costs:

- memory: the bytes of the node's output in float32 (4 bytes per element), so
  a convolution's output is ``N * C * H * W * 4``;
- duration: floating-point operations, counting a multiply-add as 2:
  convolution ``2 * N * H_out * W_out * C_out * C_in * k * k`` (biases not
  counted), dense ``2 * N * in * out``, elementwise ops (relu, gelu, add,
  concat copy, embedding lookup) one per output element, pooling
  ``k * k`` per output element (global pooling: one per input element),
  batchnorm and layernorm 2 per element (scale and shift), softmax 3 per
  element (exp, sum, divide), attention ``2 * N * heads * seq * seq * d``
  for each of the two products;
- ``fixed_memory``: the bytes of the learnable parameters (float32), which
  stay resident throughout. Batchnorm running statistics, optimizer state and
  weight gradients are not counted, so the parameter counts equal the
  published ones (VGG16 138,357,544; ResNet-50 25,557,032; DenseNet-121
  7,978,856; GPT-2 small 124,439,808 at seq 1024).

As in Checkmate's graphs, the network input is not a node (the first layer has
no inputs) and the loss keeps one float32 per sample (per token for the
transformer). Dropout is left out. A gradient node costs twice its forward
node (`training_graph`'s default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from remat_bench.core.errors import GraphError
from remat_bench.core.graph import Graph
from remat_bench.generators.training import ForwardOp, training_graph

FLOAT32 = 4
# The network input: a layer reading it lists no input node, as in Checkmate.
INPUT = "<input>"
# Softmax cross-entropy reads each logit a few times (exp, sum, log-pick).
LOSS_FLOPS_PER_LOGIT = 3

Shape = tuple[int, ...]


def _check_int(kind: str, label: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GraphError(f"{kind}: {label} must be a whole number of at least {minimum}, not {value!r}")
    return value


class _Net:
    """Collects forward ops with per-sample shapes (channels first), their FLOPs and parameter count."""

    def __init__(self, kind: str, batch: int, input_shape: Shape) -> None:
        self.kind = kind
        self.batch = batch
        self.ops: list[ForwardOp] = []
        self.shape: dict[str, Shape] = {INPUT: input_shape}
        self.params = 0

    def elements(self, x: str) -> int:
        return self.batch * math.prod(self.shape[x])

    def add_op(self, id: str, op: str, inputs: Sequence[str], shape: Shape, flops: int, params: int = 0,
               **metadata: int) -> str:
        """Add a forward op; extra keyword arguments go to its metadata (a convolution's kernel and stride)."""
        if min(shape) < 1:
            raise GraphError(
                f"{self.kind}: the input is too small: '{id}' would have shape {[self.batch, *shape]}; "
                "use a larger resolution"
            )
        self.shape[id] = shape
        self.params += params
        self.ops.append(
            ForwardOp(
                id=id,
                op=op,
                inputs=[x for x in inputs if x != INPUT],
                memory=FLOAT32 * self.batch * math.prod(shape),
                duration=int(flops),
                metadata={"shape": [self.batch, *shape], **metadata},
            )
        )
        return id

    # -- convolutional layers (shapes C, H, W)

    def conv(self, id: str, x: str, out: int, k: int, stride: int = 1, padding: int | None = None,
             bias: bool = False) -> str:
        c, h, w = self.shape[x]
        p = k // 2 if padding is None else padding
        ho, wo = (h + 2 * p - k) // stride + 1, (w + 2 * p - k) // stride + 1
        flops = 2 * self.batch * ho * wo * out * c * k * k
        return self.add_op(id, "conv2d", [x], (out, ho, wo), flops, k * k * c * out + (out if bias else 0),
                           kernel=k, stride=stride)

    def conv_transpose(self, id: str, x: str, out: int, k: int = 2, stride: int = 2) -> str:
        c, h, w = self.shape[x]
        ho, wo = (h - 1) * stride + k, (w - 1) * stride + k
        # Every input pixel scatters a k x k x out patch.
        flops = 2 * self.batch * h * w * c * out * k * k
        return self.add_op(id, "conv_transpose2d", [x], (out, ho, wo), flops, k * k * c * out + out,
                           kernel=k, stride=stride)

    def pool(self, id: str, x: str, op: str, k: int, stride: int, padding: int = 0) -> str:
        c, h, w = self.shape[x]
        ho, wo = (h + 2 * padding - k) // stride + 1, (w + 2 * padding - k) // stride + 1
        return self.add_op(id, op, [x], (c, ho, wo), self.batch * c * ho * wo * k * k)

    def global_avgpool(self, id: str, x: str) -> str:
        return self.add_op(id, "avgpool", [x], (self.shape[x][0],), self.elements(x))

    def batchnorm(self, id: str, x: str) -> str:
        return self.add_op(id, "batchnorm", [x], self.shape[x], 2 * self.elements(x), 2 * self.shape[x][0])

    def concat(self, id: str, xs: Sequence[str]) -> str:
        first = self.shape[xs[0]]
        shape = (sum(self.shape[x][0] for x in xs), *first[1:])
        return self.add_op(id, "concat", xs, shape, self.batch * math.prod(shape))

    # -- shape-agnostic layers

    def elementwise(self, id: str, op: str, inputs: Sequence[str]) -> str:
        return self.add_op(id, op, inputs, self.shape[inputs[0]], self.elements(inputs[0]))

    def relu(self, id: str, x: str) -> str:
        return self.elementwise(id, "relu", [x])

    def dense(self, id: str, x: str, out: int, bias: bool = True, flatten: bool = False) -> str:
        """A linear layer on the last axis (or on the whole sample, flattened)."""
        shape = self.shape[x]
        if flatten:
            shape = (math.prod(shape),)
        rows, fan_in = math.prod(shape[:-1]), shape[-1]
        flops = 2 * self.batch * rows * fan_in * out
        return self.add_op(id, "dense", [x], (*shape[:-1], out), flops, fan_in * out + (out if bias else 0))

    def layernorm(self, id: str, x: str) -> str:
        return self.add_op(id, "layernorm", [x], self.shape[x], 2 * self.elements(x), 2 * self.shape[x][-1])

    # -- the training graph

    def training_graph(self, name: str, metadata: dict, *, loss_per_sample: int = 1) -> Graph:
        sink = self.ops[-1].id
        return training_graph(
            self.ops,
            name=name,
            loss_memory=FLOAT32 * self.batch * loss_per_sample,
            loss_duration=LOSS_FLOPS_PER_LOGIT * self.elements(sink),
            fixed_memory=FLOAT32 * self.params,
            units={"memory": "bytes", "duration": "flops"},
            metadata={**metadata, "parameters": self.params},
        )


# ---------------------------------------------------------------------- VGG


VGG16_BLOCKS = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))


def vgg16(batch: int = 32, resolution: int = 224, *, classes: int = 1000) -> Graph:
    """VGG16 (Simonyan and Zisserman 2015, configuration D) as a training graph.

    Five blocks of 3x3 convolutions (each followed by its own relu node) and a
    2x2 max-pool, then fc1 (4096), relu, fc2 (4096), relu and the 1000-way
    ``predictions`` layer. 73 nodes (36 forward).

    Parameters
    ----------
    batch : int
        Samples per batch.
    resolution : int
        The input images' height and width (pixels), at least 32.
    classes : int
        The outputs of ``predictions``.

    Returns
    -------
    Graph
        Memory in bytes, durations in flops, the parameters as fixed memory.

    Raises
    ------
    GraphError
        ``batch`` or ``resolution`` is not a whole number in range.
    """
    _check_int("vgg16", "batch", batch)
    _check_int("vgg16", "resolution", resolution, 32)
    net = _Net("vgg16", batch, (3, resolution, resolution))
    x = INPUT
    for b, (channels, convs) in enumerate(VGG16_BLOCKS, start=1):
        for i in range(1, convs + 1):
            x = net.conv(f"block{b}.conv{i}", x, channels, 3, bias=True)
            x = net.relu(f"block{b}.relu{i}", x)
        x = net.pool(f"block{b}.pool", x, "maxpool", 2, 2)
    x = net.relu("fc1.relu", net.dense("fc1", x, 4096, flatten=True))
    x = net.relu("fc2.relu", net.dense("fc2", x, 4096))
    net.dense("predictions", x, classes)
    return net.training_graph(
        f"vgg16-train-b{batch}-r{resolution}",
        {"generator": "vgg16", "batch": batch, "resolution": resolution, "classes": classes},
    )


# ---------------------------------------------------------------------- ResNet

# (block type, blocks per stage): He et al. 2016, Table 1; ResNet-200 from He et al. 2016b.
RESNET_STAGES: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
    200: ("bottleneck", (3, 24, 36, 3)),
}


def resnet50(batch: int = 32, resolution: int = 224, depth: int = 50, *, classes: int = 1000) -> Graph:
    """ResNet (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016) as a training graph.

    ``depth`` is 18 or 34 (basic blocks) or 50, 101, 152, 200 (bottleneck
    blocks with stage counts [3,4,6,3], [3,4,23,3], [3,8,36,3], [3,24,36,3]).
    The layout is torchvision's (stride in the 3x3 convolution, ResNet v1.5):
    stem conv 7x7/2, bn, relu, max-pool 3x3/2; in every block each conv, bn and
    relu is a node, the first block of a stage has a projection shortcut
    (``downsample.conv``, ``downsample.bn``), and an ``add`` then a relu
    (``out``) end the block; global average pool and ``fc`` close. ResNet-50
    has 53 convolutions and 349 nodes (174 forward).

    Parameters
    ----------
    batch : int
        Samples per batch.
    resolution : int
        The input images' height and width (pixels), at least 32.
    depth : int
        18, 34, 50, 101, 152 or 200.
    classes : int
        The outputs of ``fc``.

    Returns
    -------
    Graph
        Named ``resnet<depth>-train-b<batch>-r<resolution>``; memory in bytes, durations in flops, the
        parameters as fixed memory.

    Raises
    ------
    GraphError
        An unsupported ``depth``, or ``batch`` or ``resolution`` not a whole number in range.
    """
    kind = f"resnet{depth}"
    if depth not in RESNET_STAGES:
        raise GraphError(
            f"resnet: depth {depth!r} is not supported; choose one of {', '.join(map(str, RESNET_STAGES))}"
        )
    _check_int(kind, "batch", batch)
    _check_int(kind, "resolution", resolution, 32)
    block_type, stages = RESNET_STAGES[depth]
    expansion = 4 if block_type == "bottleneck" else 1
    net = _Net(kind, batch, (3, resolution, resolution))

    x = net.conv("conv1", INPUT, 64, 7, stride=2, padding=3)
    x = net.relu("relu", net.batchnorm("bn1", x))
    x = net.pool("maxpool", x, "maxpool", 3, 2, padding=1)
    channels = 64
    for s, n_blocks in enumerate(stages, start=1):
        width = 64 * 2 ** (s - 1)
        for b in range(1, n_blocks + 1):
            p = f"layer{s}.block{b}"
            stride = 2 if (b == 1 and s > 1) else 1
            shortcut = x
            if block_type == "bottleneck":
                y = net.relu(f"{p}.relu1", net.batchnorm(f"{p}.bn1", net.conv(f"{p}.conv1", x, width, 1)))
                y = net.conv(f"{p}.conv2", y, width, 3, stride=stride)
                y = net.relu(f"{p}.relu2", net.batchnorm(f"{p}.bn2", y))
                y = net.batchnorm(f"{p}.bn3", net.conv(f"{p}.conv3", y, width * expansion, 1))
            else:
                y = net.conv(f"{p}.conv1", x, width, 3, stride=stride)
                y = net.relu(f"{p}.relu1", net.batchnorm(f"{p}.bn1", y))
                y = net.batchnorm(f"{p}.bn2", net.conv(f"{p}.conv2", y, width, 3))
            if stride != 1 or channels != width * expansion:
                shortcut = net.conv(f"{p}.downsample.conv", x, width * expansion, 1, stride=stride, padding=0)
                shortcut = net.batchnorm(f"{p}.downsample.bn", shortcut)
            x = net.relu(f"{p}.out", net.elementwise(f"{p}.add", "add", [y, shortcut]))
            channels = width * expansion
    x = net.global_avgpool("avgpool", x)
    net.dense("fc", x, classes)
    return net.training_graph(
        f"{kind}-train-b{batch}-r{resolution}",
        {"generator": "resnet50", "depth": depth, "batch": batch, "resolution": resolution,
         "classes": classes},
    )


# ---------------------------------------------------------------------- U-Net


def unet(
    batch: int = 8,
    resolution: int = 256,
    depth: int = 4,
    base_channels: int = 64,
    *,
    in_channels: int = 3,
    classes: int = 2,
) -> Graph:
    """U-Net (Ronneberger et al., MICCAI 2015) as a training graph.

    ``depth`` encoder levels ``down1..downD`` of conv3x3-relu-conv3x3-relu and
    a 2x2 max-pool (channels ``base_channels * 2**level``), a ``bottom`` level,
    then decoder levels ``upD..up1``: a 2x2 stride-2 transposed convolution
    halving the channels, a concat with the encoder level's output (the skip
    connection), and conv-relu-conv-relu; a 1x1 ``head`` convolution gives
    ``classes`` maps. Convolutions are padded, as in most implementations, so
    the output keeps the input resolution, which must be divisible by
    ``2**depth``. 99 nodes at depth 4 (49 forward).

    Parameters
    ----------
    batch : int
        Samples per batch.
    resolution : int
        The input images' height and width (pixels), a multiple of ``2**depth``.
    depth : int
        The number of encoder (and decoder) levels.
    base_channels : int
        The channels of the first level; each deeper level doubles them.
    in_channels : int
        The input images' channels.
    classes : int
        The output maps of ``head``.

    Returns
    -------
    Graph
        Memory in bytes, durations in flops, the parameters as fixed memory.

    Raises
    ------
    GraphError
        ``batch``, ``resolution``, ``depth`` or ``base_channels`` is not a whole number of at least 1, or the
        resolution is not a multiple of ``2**depth``.
    """
    _check_int("unet", "batch", batch)
    _check_int("unet", "depth", depth)
    _check_int("unet", "base_channels", base_channels)
    _check_int("unet", "resolution", resolution)
    if depth >= resolution.bit_length():  # resolution < 2**depth, told without computing 2**depth
        raise GraphError(f"unet: depth {depth} halves the resolution {depth} times; give a resolution of at "
                         f"least 2**{depth} (and divisible by it), or a smaller depth")
    if resolution % 2**depth:
        raise GraphError(
            f"unet: resolution {resolution} is not divisible by 2**depth = {2**depth}; "
            "choose a multiple so the skip connections line up"
        )
    net = _Net("unet", batch, (in_channels, resolution, resolution))

    def double_conv(prefix: str, x: str, channels: int) -> str:
        x = net.relu(f"{prefix}.relu1", net.conv(f"{prefix}.conv1", x, channels, 3, bias=True))
        return net.relu(f"{prefix}.relu2", net.conv(f"{prefix}.conv2", x, channels, 3, bias=True))

    x = INPUT
    skips = []
    for level in range(1, depth + 1):
        x = double_conv(f"down{level}", x, base_channels * 2 ** (level - 1))
        skips.append(x)
        x = net.pool(f"down{level}.pool", x, "maxpool", 2, 2)
    x = double_conv("bottom", x, base_channels * 2**depth)
    for level in range(depth, 0, -1):
        channels = base_channels * 2 ** (level - 1)
        x = net.conv_transpose(f"up{level}.upconv", x, channels)
        x = net.concat(f"up{level}.concat", [skips[level - 1], x])
        x = double_conv(f"up{level}", x, channels)
    net.conv("head", x, classes, 1, padding=0, bias=True)
    return net.training_graph(
        f"unet-train-b{batch}-r{resolution}-d{depth}",
        {"generator": "unet", "batch": batch, "resolution": resolution, "depth": depth,
         "base_channels": base_channels, "in_channels": in_channels, "classes": classes},
    )


# ---------------------------------------------------------------------- DenseNet


def densenet121(
    batch: int = 32,
    resolution: int = 224,
    growth: int = 32,
    blocks: Sequence[int] = (6, 12, 24, 16),
    *,
    bottleneck: int = 4,
    compression: float = 0.5,
    classes: int = 1000,
) -> Graph:
    """DenseNet-BC (Huang et al., "Densely Connected Convolutional Networks", CVPR 2017) as a training graph.

    Defaults give DenseNet-121. Stem: conv 7x7/2 (``2 * growth`` channels),
    bn, relu, max-pool 3x3/2. In dense block b, layer l reads the concat of
    the block's input and every earlier layer's output (``blockB.layerL.concat``;
    layer 1 reads the block input directly) and computes BN-ReLU-conv1x1
    (``bottleneck * growth`` channels)-BN-ReLU-conv3x3 (``growth`` channels);
    ``blockB.concat`` joins all of them. Transitions between blocks:
    BN-ReLU-conv1x1 (``compression`` of the channels)-avgpool 2x2. Final bn,
    relu, global average pool and ``classifier``. 853 nodes (426 forward).

    Parameters
    ----------
    batch : int
        Samples per batch.
    resolution : int
        The input images' height and width (pixels), at least 32.
    growth : int
        The channels each dense layer adds.
    blocks : Sequence of int
        The number of layers of each dense block.
    bottleneck : int
        The 1x1 convolution's channels, as a multiple of ``growth``.
    compression : float
        The share of channels a transition keeps, in (0, 1].
    classes : int
        The outputs of ``classifier``.

    Returns
    -------
    Graph
        Memory in bytes, durations in flops, the parameters as fixed memory.

    Raises
    ------
    GraphError
        ``batch``, ``resolution``, ``growth``, ``blocks`` or ``compression`` out of range.
    """
    _check_int("densenet121", "batch", batch)
    _check_int("densenet121", "resolution", resolution, 32)
    _check_int("densenet121", "growth", growth)
    if not blocks or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in blocks):
        raise GraphError(f"densenet121: blocks must be whole numbers of at least 1, not {blocks!r}")
    if not 0 < compression <= 1:
        raise GraphError(f"densenet121: compression must be in (0, 1], not {compression!r}")
    net = _Net("densenet121", batch, (3, resolution, resolution))

    x = net.conv("conv0", INPUT, 2 * growth, 7, stride=2, padding=3)
    x = net.relu("relu0", net.batchnorm("norm0", x))
    x = net.pool("pool0", x, "maxpool", 3, 2, padding=1)
    for b, n_layers in enumerate(blocks, start=1):
        features = [x]
        for i in range(1, n_layers + 1):
            p = f"block{b}.layer{i}"
            y = features[0] if len(features) == 1 else net.concat(f"{p}.concat", features)
            y = net.relu(f"{p}.relu1", net.batchnorm(f"{p}.norm1", y))
            y = net.conv(f"{p}.conv1", y, bottleneck * growth, 1, padding=0)
            y = net.relu(f"{p}.relu2", net.batchnorm(f"{p}.norm2", y))
            features.append(net.conv(f"{p}.conv2", y, growth, 3))
        x = net.concat(f"block{b}.concat", features)
        if b < len(blocks):
            t = f"transition{b}"
            x = net.relu(f"{t}.relu", net.batchnorm(f"{t}.norm", x))
            x = net.conv(f"{t}.conv", x, int(net.shape[x][0] * compression), 1, padding=0)
            x = net.pool(f"{t}.pool", x, "avgpool", 2, 2)
    x = net.relu(f"relu{len(blocks) + 1}", net.batchnorm(f"norm{len(blocks) + 1}", x))
    x = net.global_avgpool("avgpool", x)
    net.dense("classifier", x, classes)
    return net.training_graph(
        f"densenet121-train-b{batch}-r{resolution}",
        {"generator": "densenet121", "batch": batch, "resolution": resolution, "growth": growth,
         "blocks": list(blocks), "bottleneck": bottleneck, "compression": compression,
         "classes": classes},
    )


# ---------------------------------------------------------------------- Transformer


def transformer(
    layers: int = 12,
    width: int = 768,
    seq: int = 512,
    batch: int = 8,
    heads: int = 12,
    *,
    vocab: int = 50257,
) -> Graph:
    """A GPT-style decoder (Radford et al. 2019, GPT-2; Vaswani et al. 2017) as a training graph.

    ``embed`` (token and learned position embeddings), then per layer
    ``layerL.``: ``ln1``, ``qkv`` (one dense layer to 3 x width),
    ``scores`` (Q K^T per head), ``softmax``, ``attn`` (probabilities times V),
    ``proj``, ``add1`` (residual), ``ln2``, ``mlp_up`` (4 x width), ``gelu``,
    ``mlp_down``, ``add2`` (residual); then ``ln_f`` and ``logits`` over the
    vocabulary, whose weight is tied to the token embedding (GPT-2), so it
    adds no parameters. Shapes are (seq, features) per sample and
    (heads, seq, seq) for attention. 295 nodes at 12 layers (147 forward).

    Parameters
    ----------
    layers : int
        The number of decoder layers.
    width : int
        The model width, a multiple of ``heads``.
    seq : int
        Tokens per sample.
    batch : int
        Samples per batch.
    heads : int
        Attention heads per layer.
    vocab : int
        The vocabulary's size.

    Returns
    -------
    Graph
        Memory in bytes, durations in flops, the parameters as fixed memory.

    Raises
    ------
    GraphError
        An argument that is not a whole number of at least 1, or a ``width`` that ``heads`` does not divide.
    """
    for label, value in (("layers", layers), ("width", width), ("seq", seq), ("batch", batch),
                         ("heads", heads), ("vocab", vocab)):
        _check_int("transformer", label, value)
    if width % heads:
        raise GraphError(f"transformer: width {width} is not divisible by heads {heads}; pick a divisor")
    net = _Net("transformer", batch, (seq,))
    head_dim = width // heads
    n = batch

    x = net.add_op("embed", "embedding", [INPUT], (seq, width), n * seq * width,
                   params=vocab * width + seq * width)
    for i in range(1, layers + 1):
        p = f"layer{i}"
        h = net.layernorm(f"{p}.ln1", x)
        qkv = net.dense(f"{p}.qkv", h, 3 * width)
        # Two batched products per head: Q K^T, then softmax(.) V (Vaswani et al. 2017, eq. 1).
        attn_flops = 2 * n * heads * seq * seq * head_dim
        s = net.add_op(f"{p}.scores", "matmul", [qkv], (heads, seq, seq), attn_flops)
        s = net.add_op(f"{p}.softmax", "softmax", [s], (heads, seq, seq), 3 * n * heads * seq * seq)
        a = net.add_op(f"{p}.attn", "matmul", [s, qkv], (seq, width), attn_flops)
        a = net.dense(f"{p}.proj", a, width)
        x = net.elementwise(f"{p}.add1", "add", [x, a])
        h = net.layernorm(f"{p}.ln2", x)
        h = net.elementwise(f"{p}.gelu", "gelu", [net.dense(f"{p}.mlp_up", h, 4 * width)])
        h = net.dense(f"{p}.mlp_down", h, width)
        x = net.elementwise(f"{p}.add2", "add", [x, h])
    x = net.layernorm("ln_f", x)
    net.dense("logits", x, vocab, bias=False)
    net.params -= vocab * width  # tied to the token embedding
    return net.training_graph(
        f"transformer-train-l{layers}-w{width}-s{seq}-b{batch}",
        {"generator": "transformer", "layers": layers, "width": width, "seq": seq,
         "batch": batch, "heads": heads, "vocab": vocab},
        loss_per_sample=seq,
    )
