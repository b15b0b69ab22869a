#!/usr/bin/env bash
# The tokenizer against SmolLM2's real vocabulary (check_tokenizer
# --smollm2): a test of its own, so that without the downloaded model it is
# an Automake skip (exit 77), counted as one.
exec "${BT_BUILDDIR:-.}/tests/check_tokenizer" --smollm2
