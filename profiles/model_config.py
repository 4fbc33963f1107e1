"""Model architecture facts from a published ``config.json``: what KV bytes per token a model needs."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

from pearl_sched.state import Frozen


class ModelConfig(Frozen):
    """The few config.json fields the scheduler needs."""

    name: str
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(default=0, ge=0, description="Dense MLP width (0 for pure MoE layers)")
    vocab_size: int = Field(default=0, ge=0)
    num_experts: int = Field(default=0, ge=0, description="Routed experts (0: dense model)")
    num_experts_per_tok: int = Field(default=0, ge=0)
    moe_intermediate_size: int = Field(default=0, ge=0)

    @classmethod
    def from_json(cls, path: str | Path, name: str | None = None) -> ModelConfig:
        """Read a Hugging Face ``config.json``; ``head_dim`` defaults to hidden_size / heads when absent."""
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read a model config: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: a model config is a JSON object")
        missing = [k for k in ("num_hidden_layers", "num_attention_heads", "hidden_size") if k not in raw]
        if missing:
            raise ValueError(f"{path}: missing fields {missing}")
        heads = raw["num_attention_heads"]
        return cls(
            name=name or path.stem.removesuffix("_config"),
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads", heads),
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            hidden_size=raw["hidden_size"],
            intermediate_size=raw.get("intermediate_size", 0),
            vocab_size=raw.get("vocab_size", 0),
            num_experts=raw.get("num_experts", raw.get("num_local_experts", 0)),
            num_experts_per_tok=raw.get("num_experts_per_tok", 0),
            moe_intermediate_size=raw.get("moe_intermediate_size", 0),
        )

    def parameter_count(self) -> int:
        """Weights: attention, MLP (or every routed expert), embeddings and LM head; norms left out (< 0.1%)."""
        h, hd = self.hidden_size, self.head_dim
        attention = (
            h * (self.num_attention_heads + 2 * self.num_key_value_heads) * hd + self.num_attention_heads * hd * h
        )
        if self.num_experts:
            mlp = self.num_experts * 3 * h * self.moe_intermediate_size + h * self.num_experts
        else:
            mlp = 3 * h * self.intermediate_size
        return self.num_hidden_layers * (attention + mlp) + 2 * self.vocab_size * h

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """K and V for every layer and KV head: ``2 · layers · kv_heads · head_dim · dtype_bytes``."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes
