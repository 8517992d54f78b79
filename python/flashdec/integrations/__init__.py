"""flashdec inside other frameworks: `flashdec.integrations.transformers` (Hugging Face transformers)."""
