"""GenRe's model: a transformer that encodes x and decodes x⁺ feature by feature as a
distribution over bins (`RecourseTransformer`), the soft bin labels it learns from and
its sampling (`recourse_sim.recourse.genre`: the trained recourse generator)."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["RecourseTransformer", "attend", "draw_bins", "soft_labels"]


def soft_labels(values: torch.Tensor, centres: torch.Tensor, widths: torch.Tensor) -> torch.Tensor:
    """The soft labels of Eq. 8: K((x_j − μ_{j,k}) / w_j) normalised over the bins k.

    `values` is (..., d), `centres` (d, n_bins), `widths` (d,); returns (..., d, n_bins)
    rows that sum to 1 and peak at the bin nearest to each value. K is the RBF kernel
    exp(−u²/2), so the normalisation is a softmax over −u²/2.
    """
    u = (values[..., None] - centres) / widths[:, None]
    return torch.softmax(-0.5 * u * u, dim=-1)


# ------------------------------------------------------------------------------- model
class RecourseTransformer(nn.Module):
    """R_θ(x⁺ | x): a transformer encoder–decoder with per-feature binned outputs.

    Parameters
    ----------
    n_features : d, the number of features (= encoder and decoder sequence length).
    n_bins : bins per feature in the output layer.
    d_model : embedding size.
    n_heads : attention heads (must divide d_model).
    n_layers : layers in the encoder and, separately, in the decoder.
    dim_feedforward : hidden width of each layer's feed-forward block.
    dropout : dropout rate inside the transformer layers (training only).

    Buffers (saved with the weights): ``centres`` (d, n_bins) and ``widths`` (d,) of
    the bins, and ``lo``/``span`` (d,) that rescale feature values to about [0, 1]
    before they are embedded.
    """

    def __init__(
        self,
        n_features: int,
        n_bins: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        dim_feedforward: int,
        dropout: float,
    ):
        super().__init__()
        d, e = n_features, d_model
        # a scalar value x_j becomes x_j · a_j + b_j: one linear embedding per feature
        self.value_weight = nn.Parameter(torch.empty(d, e))
        self.value_bias = nn.Parameter(torch.zeros(d, e))
        self.enc_position = nn.Parameter(torch.empty(d, e))
        self.dec_position = nn.Parameter(torch.empty(d, e))
        self.start = nn.Parameter(torch.empty(e))  # the decoder's first input token
        self.head_weight = nn.Parameter(torch.empty(d, e, n_bins))
        self.head_bias = nn.Parameter(torch.zeros(d, n_bins))
        enc_layer = nn.TransformerEncoderLayer(
            e, n_heads, dim_feedforward, dropout, batch_first=True
        )
        dec_layer = nn.TransformerDecoderLayer(
            e, n_heads, dim_feedforward, dropout, batch_first=True
        )
        # nested tensors only pay off with padding, and the fast path warns without it
        self.encoder = nn.TransformerEncoder(enc_layer, n_layers, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec_layer, n_layers)
        self.register_buffer("centres", torch.zeros(d, n_bins))
        self.register_buffer("widths", torch.ones(d))
        self.register_buffer("lo", torch.zeros(d))
        self.register_buffer("span", torch.ones(d))
        self.register_buffer(
            "causal_mask", nn.Transformer.generate_square_subsequent_mask(d), persistent=False
        )
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Xavier-uniform for every matrix (as the authors' code), drawn from `generator`
        (torch's global generator when None, as for any `nn.Module`)."""
        for name, p in self.named_parameters():
            if p.dim() > 1:
                if name == "head_weight":
                    # per-feature heads: the fan is (d_model, n_bins), not the stacked shape
                    bound = math.sqrt(6.0 / (p.shape[1] + p.shape[2]))
                    with torch.no_grad():
                        p.uniform_(-bound, bound, generator=generator)
                else:
                    nn.init.xavier_uniform_(p, generator=generator)
            elif name == "start":
                with torch.no_grad():
                    p.normal_(0.0, 0.02, generator=generator)

    def embed(self, values: torch.Tensor, features: slice) -> torch.Tensor:
        """Token embeddings (..., n, d_model) of values (..., n) of the given features."""
        z = (values - self.lo[features]) / self.span[features]
        return z[..., None] * self.value_weight[features] + self.value_bias[features]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder states (B, d, d_model) of sources x (B, d)."""
        tokens = self.embed(x, slice(None)) + self.enc_position
        if self.training:
            return self.encoder(tokens)
        # Inference: the same post-norm layers written out (dropout is off), several
        # times faster on CPU than nn.MultiheadAttention's fused path for d tokens.
        h = tokens
        head_sum = self.head_sum(tokens.dtype)
        for layer in self.encoder.layers:
            sa = layer.self_attn
            q, k, v = nn.functional.linear(h, sa.in_proj_weight, sa.in_proj_bias).chunk(3, -1)
            h = layer.norm1(
                h + sa.out_proj(attend(q[:, :, None], k[:, None], v[:, None], head_sum))
            )
            h = layer.norm2(h + layer.linear2(layer.activation(layer.linear1(h))))
        return h

    def head_sum(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """(d_model, n_heads) indicator: entry (i, h) is 1 if coordinate i is in head h."""
        e, heads = self.start.shape[0], self.decoder.layers[0].self_attn.num_heads
        out = torch.zeros(e, heads, dtype=dtype)
        out[torch.arange(e), torch.arange(e) // (e // heads)] = 1.0
        return out

    def decoder_input(self, x_plus: torch.Tensor) -> torch.Tensor:
        """[start, x⁺_1, …, x⁺_{d−1}] embedded with positions, (B, d, d_model)."""
        b, d = x_plus.shape
        prev = self.embed(x_plus[:, : d - 1], slice(0, d - 1))
        tokens = torch.cat([self.start.expand(b, 1, -1), prev], dim=1)
        return tokens + self.dec_position

    def forward(self, x: torch.Tensor, x_plus: torch.Tensor) -> torch.Tensor:
        """Teacher-forced bin logits (B, d, n_bins) of every feature of x⁺ given x."""
        memory = self.encode(x)
        h = self.decoder(
            self.decoder_input(x_plus), memory, tgt_mask=self.causal_mask, tgt_is_causal=True
        )
        return torch.einsum("bde,den->bdn", h, self.head_weight) + self.head_bias

    # -- incremental decoding (sampling) ---------------------------------------------
    # Each decoder layer is post-norm with a ReLU feed-forward block (the nn defaults):
    #   h = norm1(h + SelfAttn(h)); h = norm2(h + CrossAttn(h, memory)); h = norm3(h + FF(h)).
    # Causal self-attention means position j's output depends only on positions ≤ j, so
    # sampling can feed one new token per step and keep each layer's keys and values
    # (a KV cache): O(d) token updates per sequence instead of O(d²). The samples of one
    # source share its encoder states, so cross-attention keys and values are computed
    # once per source and its `repeats` queries attend to them together.

    def start_decoding(self, memory: torch.Tensor, repeats: int = 1) -> dict:
        """A KV cache for decoding from encoder states `memory` (B, d, E), with `repeats`
        consecutive sequences (samples) per source row."""
        b, d, e = memory.shape
        n = b * repeats
        layers = []
        for layer in self.decoder.layers:
            w, bias = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias
            kv = nn.functional.linear(memory, w[e:], bias[e:])
            layers.append(
                {
                    # (B, 1, d, E): broadcast over the samples of each source
                    "cross_k": kv[:, None, :, :e].contiguous(),
                    "cross_v": kv[:, None, :, e:].contiguous(),
                    "self_k": memory.new_empty(n, d, e),
                    "self_v": memory.new_empty(n, d, e),
                }
            )
        return {"layers": layers, "repeats": repeats, "head_sum": self.head_sum(memory.dtype)}

    def decode_step(self, token: torch.Tensor, cache: dict, j: int) -> torch.Tensor:
        """Bin logits (B, n_bins) of feature j from decoder input token j (B, E).

        Tokens 0..j−1 must have gone through earlier calls with the same cache; equals
        the teacher-forced `forward` at position j. At j = 0 `token` may instead hold one
        row per source: the start token is the same for all samples of a source, so
        position 0 is then decoded once per source (logits one row per source) and its
        keys and values are copied to every sample's cache.
        """
        n, e = token.shape
        repeats, head_sum = cache["repeats"], cache["head_sum"]
        per_source = n != cache["layers"][0]["self_k"].shape[0]
        if per_source and (j != 0 or n * repeats != cache["layers"][0]["self_k"].shape[0]):
            raise ValueError(f"token has {n} rows: one per sequence, or per source at j = 0")
        group = 1 if per_source else repeats  # queries per source in cross-attention
        h = token
        for layer, c in zip(self.decoder.layers, cache["layers"], strict=True):
            sa, ca = layer.self_attn, layer.multihead_attn
            qkv = nn.functional.linear(h, sa.in_proj_weight, sa.in_proj_bias).view(n, 3, e)
            if per_source:
                c["self_k"][:, 0] = qkv[:, 1].repeat_interleave(repeats, 0)
                c["self_v"][:, 0] = qkv[:, 2].repeat_interleave(repeats, 0)
                att = qkv[:, 2]  # attention to a single key returns its value
            else:
                c["self_k"][:, j] = qkv[:, 1]
                c["self_v"][:, j] = qkv[:, 2]
                keys, values = c["self_k"][:, : j + 1], c["self_v"][:, : j + 1]
                att = attend(qkv[:, 0, None], keys, values, head_sum)
            h = layer.norm1(h + sa.out_proj(att))
            # the samples of a source attend to its encoder states together
            q = nn.functional.linear(h, ca.in_proj_weight[:e], ca.in_proj_bias[:e])
            q = q.view(n // group, group, 1, e)
            att = attend(q, c["cross_k"], c["cross_v"], head_sum).view(n, e)
            h = layer.norm2(h + ca.out_proj(att))
            h = layer.norm3(h + layer.linear2(layer.activation(layer.linear1(h))))
        return h @ self.head_weight[j] + self.head_bias[j]


def draw_bins(logits: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One bin per row of (n, n_bins) `logits`, drawn from softmax(logits).

    Inverse-CDF sampling: one uniform number per row against the cumulative
    unnormalised probabilities (torch.multinomial draws one exponential per bin).
    """
    weights = (logits - logits.amax(-1, keepdim=True)).exp_()
    cdf = weights.cumsum(-1)
    u = torch.rand(len(cdf), 1, generator=gen, dtype=cdf.dtype) * cdf[:, -1:]
    # bins of zero probability add nothing to the CDF, so u never lands in them
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_max(cdf.shape[1] - 1)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_sum: torch.Tensor
) -> torch.Tensor:
    """Scaled dot-product attention with per-head sums as matrix products.

    q (..., 1, E) attends to k and v (..., L, E) (broadcast over the leading dims);
    head_sum (E, H) maps embedding coordinates to their heads; returns (..., E). With a
    head size of a few numbers, summing over a head's coordinates by a matrix product
    beats reductions over the tiny head dimension and, for a handful of queries per
    key set, the fused kernels' per-(batch, head) overhead.
    """
    scale = 1.0 / math.sqrt(q.shape[-1] // head_sum.shape[1])
    scores = (q * k) @ (head_sum * scale)  # (..., L, H)
    # softmax over L without the max shift when no exp overflows and the largest
    # stays a normal float (the usual case: it saves two passes); else the shifted form
    weights = scores.exp()
    total = weights.sum(-2)
    # (the extremes propagate NaN, and NaN fails both tests)
    if not (total.amin() > 1e-30 and total.amax() < math.inf):
        weights = (scores - scores.amax(-2, keepdim=True)).exp_()
        total = weights.sum(-2)
    return ((weights @ head_sum.T) * v).sum(-2) / (total @ head_sum.T)


# ------------------------------------------------------------------------------- GenRe
