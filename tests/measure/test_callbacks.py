"""The callbacks on real trainers, on CPU: a Hugging Face Trainer and a Lightning Trainer, three steps each."""

from __future__ import annotations

import logging

import pytest

from gpuwise.measure.callbacks import hf_callback, lightning_callback
from gpuwise.measure.tracker import Tracker

torch = pytest.importorskip("torch")


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def test_hf_trainer_records_three_steps(tmp_path, caplog) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=2,
                                          use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
                                          include_num_input_tokens_seen="all", disable_tqdm=True)
    tracker = Tracker(flops_per_step=1e9, peak_flops=1e12)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=TokenDataset(16, 16, 64),
                                   callbacks=[hf_callback(tracker, print_summary=False)])
    with caplog.at_level(logging.INFO, logger="gpuwise.track"):
        trainer.train()
    assert tracker.steps == 3 and not tracker.in_step
    assert all(r.step_time_s > 0 for r in tracker.records)
    assert [r.tokens for r in tracker.records] == [2 * 16] * 3  # num_input_tokens_seen per step
    assert tracker.records[1].data_wait_s > 0  # the batch fetch between steps
    assert tracker.context.precision == "fp32"  # no bf16/fp16 flag, fp32 parameters
    assert "gpuwise track: 2 steps measured" in caplog.text


def test_lightning_trainer_records_three_steps(capsys) -> None:
    L = pytest.importorskip("lightning.pytorch")

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    tracker = Tracker()
    trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accumulate_grad_batches=2,
                        callbacks=[lightning_callback(tracker, tokens=lambda b: b[0].shape[0])])
    trainer.fit(Tiny(), loader)
    assert tracker.steps == 3 and not tracker.in_step
    assert all(r.step_time_s > 0 for r in tracker.records)
    assert [r.tokens for r in tracker.records] == [2 * 4] * 3  # two accumulated batches of 4 per step, 1 rank
    assert tracker.records[0].data_wait_s > 0  # the second batch was fetched inside the first step
    assert tracker.context.precision == "fp32"
    assert "gpuwise track: 2 steps measured" in capsys.readouterr().out

