"""Implementation versions shared by several metric files (a module starting with ``_`` is not a
metric module: discovery skips it). Bump a version whenever the numbers of its code could change;
it is stored with every run, so results of different versions are never mixed."""

#: metrics.scorers.cider (CIDEr-D, and set accuracy = mean CIDEr-D)
CIDER_D_VERSION = "captioneval-cider-d/1"
#: metrics.scorers.diversity (Self-CIDEr, LSA, mBLEU, vocabulary)
DIVERSITY_VERSION = "captioneval-diversity/1"
#: metrics.scorers.lexical on lexicalrichness 0.5.1 (TTR, Root TTR, Log TTR, HD-D, MTLD)
LEXICAL_VERSION = "captioneval-lexical/1+lexicalrichness-0.5.1"
#: metrics.scorers.vifidel
VIFIDEL_VERSION = "captioneval-vifidel/1"
