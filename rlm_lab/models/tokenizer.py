"""A character-level tokenizer for the task alphabet, built offline.

One token per character keeps the vocabulary tiny (~30 tokens), so a 0.1M-parameter model is
mostly transformer, not embedding. It is a real ``PreTrainedTokenizerFast`` (built with the
``tokenizers`` library), so TRL trainers, ``save_pretrained`` and ``AutoTokenizer`` all work.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIALS = (PAD, EOS, UNK)
# Everything the built-in tasks print: digits, operators, separators and a few letters for labels.
ALPHABET = "0123456789+-*/()=,:; abcdefghijklmnopqrstuvwxyz<>"


def char_tokenizer(alphabet: str = ALPHABET):
    """Build a ``PreTrainedTokenizerFast`` with one token per character of ``alphabet``.

    The tokenizer adds no BOS/EOS on its own; training code appends ``eos_token`` to targets
    (TRL's SFTTrainer does this itself), and generation stops at it.
    """
    from transformers import PreTrainedTokenizerFast

    if len(set(alphabet)) != len(alphabet):
        raise ValueError("alphabet has repeated characters")
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Split every character into its own pre-token (spaces included), and join them back on decode.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )
    return fast
