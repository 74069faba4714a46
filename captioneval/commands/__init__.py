"""The subcommands of ``captioneval`` (:mod:`captioneval.cli`), one module each."""
