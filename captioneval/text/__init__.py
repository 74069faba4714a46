"""Caption text processing: the PTB tokenisation of the COCO caption evaluation.

* :mod:`~captioneval.text.ptb` -- a pure-Python Penn Treebank tokenizer equal to Stanford
  CoreNLP 3.4.1's ``PTBTokenizer`` as pycocoevalcap runs it;
* :mod:`~captioneval.text.tokenizer` -- ``ptb_tokenize``: that tokenizer (the default) or
  pycocoevalcap's jar (``CAPTIONEVAL_TOKENIZER=java``), lower-cased with punctuation removed.

Django-free.
"""
