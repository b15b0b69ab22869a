#!/usr/bin/env bash
# The tokenizer against Gemma 3's real 262144-token vocabulary
# (check_tokenizer --gemma3): a test of its own, so that without the
# downloaded model (scripts/fetch-gemma3) it is an Automake skip (exit 77),
# counted as one.
exec "${BT_BUILDDIR:-.}/tests/check_tokenizer" --gemma3
