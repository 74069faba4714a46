"""Pure-Python PTB tokeniser: the same output as pycocoevalcap 1.2's Java ``PTBTokenizer`` path.

Licence: this module follows the rules of Stanford CoreNLP 3.4.1's ``PTBLexer.flex`` one by one, so it
carries CoreNLP's licence terms, the GNU General Public License version 2 or (at your option) any
later version (SPDX GPL-2.0-or-later; Stanford distributed the 3.4.x releases under "the full GPL, v2
or later"; text in LICENSES/GPL-2.0-or-later.txt), not the BSD-3-Clause licence of the rest of
captioneval. Copyright of the rules: The Board of Trustees of The Leland Stanford Junior University.
No CoreNLP code is copied here.

:func:`tokenize` returns, for every caption, exactly what :func:`captioneval.text.tokenizer.ptb_tokenize_java`
returns (Stanford CoreNLP 3.4.1 ``edu.stanford.nlp.process.PTBTokenizer -preserveLines -lowerCase``
on the captions written one per line, then pycocoevalcap's ``PUNCTUATIONS`` tokens removed), without
a Java runtime. It is an independent re-implementation of the tokeniser's documented rules (the
JFlex specification ``PTBLexer.flex`` of CoreNLP 3.4.1, Manning et al. 2014, "The Stanford CoreNLP
Natural Language Processing Toolkit", ACL demos), checked against the 3.4.1 jar itself on every
bundled dataset and on a hostile corpus (tests/test_ptb_tokenizer.py, benchmarks/tokenizer_equality.py).

How it works
------------
The Java lexer is a longest-match scanner: at each position every rule is tried, the longest match
wins (a rule's trailing context ``r1/r2`` counts towards its length but only ``r1`` becomes the
token) and ties go to the rule written first. Here every rule is a compiled regular expression (or
several, whose longest match is taken), tried only when the current character can start it; the
rule's action then normalises the token as the Java action does (``-LRB-``, latex quotes, ``--``,
``...``, currency, fractions, soft hyphens, ``&amp;``, non-breaking spaces inside SGML / fraction /
phone tokens, ``cannot`` -> ``can not``, ``gonna`` -> ``gon na``...). The character classes
``[:letter:]``, ``[:digit:]`` and ``[:uppercase:]`` are those compiled into the 3.4.1 jar (Unicode
6.2 as seen by Java, Basic Multilingual Plane only); they are tabulated below as code point ranges,
measured by running the jar on every BMP character. Characters outside the BMP (emoji...) are
untokenisable for the Java lexer and dropped, except inside URL, e-mail and SGML tokens.

Speed
-----
Most captions are *plain* (ASCII words, hyphenated compounds, ``. , ; : ! ?`` and possessive ``'s``
chunks): their output is found for a whole batch at once by a few ``re`` / ``str`` passes over the
captions joined by line ends (:func:`_plain_batch`); only the others go through the scanner. Texts whose
characters are ASCII, or non-ASCII characters outside the large Unicode classes, are scanned with a copy
of the rules whose classes are cut down to ASCII (same matches on such texts; far cheaper to compile).

Context
-------
The Java tokeniser reads all captions as one text, one per line, so a few rules look across a line
end: a caption ending with a one-letter acronym (``"plan B."``) or with ``ca. / fig. / no. ...``
is tokenised differently when the *next* caption starts with ``The``, ``A``, ``He``... or with a
digit, and an SGML tag with a quoted attribute value may run over several lines. :func:`tokenize`
reproduces this (it looks at the next caption, and at the sentinel caption the Java wrapper
appends, when it matters), so the result for a caption can depend on its neighbour exactly as with
Java. Results are cached per distinct caption (and neighbour, when it matters).
"""
from __future__ import annotations

import bisect
import itertools
import operator
import re
import unicodedata
from typing import Sequence

try:  # Python 3.11+
    from re import _compiler as _sre_compile, _constants as _sre_c, _parser as _sre_parse
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_compile as _sre_compile  # type: ignore[no-redef]
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

__all__ = ["PTB_PYTHON_VERSION", "PUNCTUATIONS", "SENTINEL", "tokenize", "raw_tokens"]

PTB_PYTHON_VERSION = "captioneval-ptb/1"

#: pycocoevalcap 1.2 ``tokenizer/ptbtokenizer.py`` PUNCTUATIONS: tokens removed after tokenisation
#: (compared after lower-casing, so the bracket tokens ``-lrb-`` ... are *not* removed).
PUNCTUATIONS = frozenset(["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-",
                          ".", "?", "!", ",", ":", "-", "--", "...", ";"])
#: Same as tokenizer._LINE_BREAKS: line-break characters inside a caption become spaces.
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})
#: The last caption the Java wrapper appends to every batch (tokenizer._SENTINEL); it is the
#: "next caption" of the last real one.
SENTINEL = "captioneval end of batch"

# [:letter:], [:digit:], [:uppercase:] of the 3.4.1 lexer: BMP code point ranges (hex), measured by running the
# jar on every BMP character (they are Java 7/8's Character.isLetter / isDigit / isUpperCase, Unicode 6.2).
_LETTER_RANGES = """
0041-005A 0061-007A 00AA 00B5 00BA 00C0-00D6 00D8-00F6 00F8-02C1 02C6-02D1 02E0-02E4 02EC 02EE 0370-0374
0376-0377 037A-037D 0386 0388-038A 038C 038E-03A1 03A3-03F5 03F7-0481 048A-0527 0531-0556 0559 0561-0587
05D0-05EA 05F0-05F2 0620-064A 066E-066F 0671-06D3 06D5 06E5-06E6 06EE-06EF 06FA-06FC 06FF 0710 0712-072F
074D-07A5 07B1 07CA-07EA 07F4-07F5 07FA 0800-0815 081A 0824 0828 0840-0858 08A0 08A2-08AC 0904-0939 093D 0950
0958-0961 0971-0977 0979-097F 0985-098C 098F-0990 0993-09A8 09AA-09B0 09B2 09B6-09B9 09BD 09CE 09DC-09DD
09DF-09E1 09F0-09F1 0A05-0A0A 0A0F-0A10 0A13-0A28 0A2A-0A30 0A32-0A33 0A35-0A36 0A38-0A39 0A59-0A5C 0A5E
0A72-0A74 0A85-0A8D 0A8F-0A91 0A93-0AA8 0AAA-0AB0 0AB2-0AB3 0AB5-0AB9 0ABD 0AD0 0AE0-0AE1 0B05-0B0C 0B0F-0B10
0B13-0B28 0B2A-0B30 0B32-0B33 0B35-0B39 0B3D 0B5C-0B5D 0B5F-0B61 0B71 0B83 0B85-0B8A 0B8E-0B90 0B92-0B95
0B99-0B9A 0B9C 0B9E-0B9F 0BA3-0BA4 0BA8-0BAA 0BAE-0BB9 0BD0 0C05-0C0C 0C0E-0C10 0C12-0C28 0C2A-0C33 0C35-0C39
0C3D 0C58-0C59 0C60-0C61 0C85-0C8C 0C8E-0C90 0C92-0CA8 0CAA-0CB3 0CB5-0CB9 0CBD 0CDE 0CE0-0CE1 0CF1-0CF2
0D05-0D0C 0D0E-0D10 0D12-0D3A 0D3D 0D4E 0D60-0D61 0D7A-0D7F 0D85-0D96 0D9A-0DB1 0DB3-0DBB 0DBD 0DC0-0DC6
0E01-0E30 0E32-0E33 0E40-0E46 0E81-0E82 0E84 0E87-0E88 0E8A 0E8D 0E94-0E97 0E99-0E9F 0EA1-0EA3 0EA5 0EA7
0EAA-0EAB 0EAD-0EB0 0EB2-0EB3 0EBD 0EC0-0EC4 0EC6 0EDC-0EDF 0F00 0F40-0F47 0F49-0F6C 0F88-0F8C 1000-102A 103F
1050-1055 105A-105D 1061 1065-1066 106E-1070 1075-1081 108E 10A0-10C5 10C7 10CD 10D0-10FA 10FC-1248 124A-124D
1250-1256 1258 125A-125D 1260-1288 128A-128D 1290-12B0 12B2-12B5 12B8-12BE 12C0 12C2-12C5 12C8-12D6 12D8-1310
1312-1315 1318-135A 1380-138F 13A0-13F4 1401-166C 166F-167F 1681-169A 16A0-16EA 1700-170C 170E-1711 1720-1731
1740-1751 1760-176C 176E-1770 1780-17B3 17D7 17DC 1820-1877 1880-18A8 18AA 18B0-18F5 1900-191C 1950-196D
1970-1974 1980-19AB 19C1-19C7 1A00-1A16 1A20-1A54 1AA7 1B05-1B33 1B45-1B4B 1B83-1BA0 1BAE-1BAF 1BBA-1BE5
1C00-1C23 1C4D-1C4F 1C5A-1C7D 1CE9-1CEC 1CEE-1CF1 1CF5-1CF6 1D00-1DBF 1E00-1F15 1F18-1F1D 1F20-1F45 1F48-1F4D
1F50-1F57 1F59 1F5B 1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE 1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB 1FE0-1FEC
1FF2-1FF4 1FF6-1FFC 2071 207F 2090-209C 2102 2107 210A-2113 2115 2119-211D 2124 2126 2128 212A-212D 212F-2139
213C-213F 2145-2149 214E 2183-2184 2C00-2C2E 2C30-2C5E 2C60-2CE4 2CEB-2CEE 2CF2-2CF3 2D00-2D25 2D27 2D2D
2D30-2D67 2D6F 2D80-2D96 2DA0-2DA6 2DA8-2DAE 2DB0-2DB6 2DB8-2DBE 2DC0-2DC6 2DC8-2DCE 2DD0-2DD6 2DD8-2DDE 2E2F
3005-3006 3031-3035 303B-303C 3041-3096 309D-309F 30A1-30FA 30FC-30FF 3105-312D 3131-318E 31A0-31BA 31F0-31FF
3400-4DB5 4E00-9FCC A000-A48C A4D0-A4FD A500-A60C A610-A61F A62A-A62B A640-A66E A67F-A697 A6A0-A6E5 A717-A71F
A722-A788 A78B-A78E A790-A793 A7A0-A7AA A7F8-A801 A803-A805 A807-A80A A80C-A822 A840-A873 A882-A8B3 A8F2-A8F7
A8FB A90A-A925 A930-A946 A960-A97C A984-A9B2 A9CF AA00-AA28 AA40-AA42 AA44-AA4B AA60-AA76 AA7A AA80-AAAF AAB1
AAB5-AAB6 AAB9-AABD AAC0 AAC2 AADB-AADD AAE0-AAEA AAF2-AAF4 AB01-AB06 AB09-AB0E AB11-AB16 AB20-AB26 AB28-AB2E
ABC0-ABE2 AC00-D7A3 D7B0-D7C6 D7CB-D7FB F900-FA6D FA70-FAD9 FB00-FB06 FB13-FB17 FB1D FB1F-FB28 FB2A-FB36
FB38-FB3C FB3E FB40-FB41 FB43-FB44 FB46-FBB1 FBD3-FD3D FD50-FD8F FD92-FDC7 FDF0-FDFB FE70-FE74 FE76-FEFC
FF21-FF3A FF41-FF5A FF66-FFBE FFC2-FFC7 FFCA-FFCF FFD2-FFD7 FFDA-FFDC
"""
_DIGIT_RANGES = """
0030-0039 0660-0669 06F0-06F9 07C0-07C9 0966-096F 09E6-09EF 0A66-0A6F 0AE6-0AEF 0B66-0B6F 0BE6-0BEF 0C66-0C6F
0CE6-0CEF 0D66-0D6F 0E50-0E59 0ED0-0ED9 0F20-0F29 1040-1049 1090-1099 17E0-17E9 1810-1819 1946-194F 19D0-19D9
1A80-1A89 1A90-1A99 1B50-1B59 1BB0-1BB9 1C40-1C49 1C50-1C59 A620-A629 A8D0-A8D9 A900-A909 A9D0-A9D9 AA50-AA59
ABF0-ABF9 FF10-FF19
"""
_UPPER_RANGES = """
0041-005A 00C0-00D6 00D8-00DE 0100 0102 0104 0106 0108 010A 010C 010E 0110 0112 0114 0116 0118 011A 011C 011E
0120 0122 0124 0126 0128 012A 012C 012E 0130 0132 0134 0136 0139 013B 013D 013F 0141 0143 0145 0147 014A 014C
014E 0150 0152 0154 0156 0158 015A 015C 015E 0160 0162 0164 0166 0168 016A 016C 016E 0170 0172 0174 0176
0178-0179 017B 017D 0181-0182 0184 0186-0187 0189-018B 018E-0191 0193-0194 0196-0198 019C-019D 019F-01A0 01A2
01A4 01A6-01A7 01A9 01AC 01AE-01AF 01B1-01B3 01B5 01B7-01B8 01BC 01C4 01C7 01CA 01CD 01CF 01D1 01D3 01D5 01D7
01D9 01DB 01DE 01E0 01E2 01E4 01E6 01E8 01EA 01EC 01EE 01F1 01F4 01F6-01F8 01FA 01FC 01FE 0200 0202 0204 0206
0208 020A 020C 020E 0210 0212 0214 0216 0218 021A 021C 021E 0220 0222 0224 0226 0228 022A 022C 022E 0230 0232
023A-023B 023D-023E 0241 0243-0246 0248 024A 024C 024E 0370 0372 0376 0386 0388-038A 038C 038E-038F 0391-03A1
03A3-03AB 03CF 03D2-03D4 03D8 03DA 03DC 03DE 03E0 03E2 03E4 03E6 03E8 03EA 03EC 03EE 03F4 03F7 03F9-03FA
03FD-042F 0460 0462 0464 0466 0468 046A 046C 046E 0470 0472 0474 0476 0478 047A 047C 047E 0480 048A 048C 048E
0490 0492 0494 0496 0498 049A 049C 049E 04A0 04A2 04A4 04A6 04A8 04AA 04AC 04AE 04B0 04B2 04B4 04B6 04B8 04BA
04BC 04BE 04C0-04C1 04C3 04C5 04C7 04C9 04CB 04CD 04D0 04D2 04D4 04D6 04D8 04DA 04DC 04DE 04E0 04E2 04E4 04E6
04E8 04EA 04EC 04EE 04F0 04F2 04F4 04F6 04F8 04FA 04FC 04FE 0500 0502 0504 0506 0508 050A 050C 050E 0510 0512
0514 0516 0518 051A 051C 051E 0520 0522 0524 0526 0531-0556 10A0-10C5 10C7 10CD 1E00 1E02 1E04 1E06 1E08 1E0A
1E0C 1E0E 1E10 1E12 1E14 1E16 1E18 1E1A 1E1C 1E1E 1E20 1E22 1E24 1E26 1E28 1E2A 1E2C 1E2E 1E30 1E32 1E34 1E36
1E38 1E3A 1E3C 1E3E 1E40 1E42 1E44 1E46 1E48 1E4A 1E4C 1E4E 1E50 1E52 1E54 1E56 1E58 1E5A 1E5C 1E5E 1E60 1E62
1E64 1E66 1E68 1E6A 1E6C 1E6E 1E70 1E72 1E74 1E76 1E78 1E7A 1E7C 1E7E 1E80 1E82 1E84 1E86 1E88 1E8A 1E8C 1E8E
1E90 1E92 1E94 1E9E 1EA0 1EA2 1EA4 1EA6 1EA8 1EAA 1EAC 1EAE 1EB0 1EB2 1EB4 1EB6 1EB8 1EBA 1EBC 1EBE 1EC0 1EC2
1EC4 1EC6 1EC8 1ECA 1ECC 1ECE 1ED0 1ED2 1ED4 1ED6 1ED8 1EDA 1EDC 1EDE 1EE0 1EE2 1EE4 1EE6 1EE8 1EEA 1EEC 1EEE
1EF0 1EF2 1EF4 1EF6 1EF8 1EFA 1EFC 1EFE 1F08-1F0F 1F18-1F1D 1F28-1F2F 1F38-1F3F 1F48-1F4D 1F59 1F5B 1F5D 1F5F
1F68-1F6F 1FB8-1FBB 1FC8-1FCB 1FD8-1FDB 1FE8-1FEC 1FF8-1FFB 2102 2107 210B-210D 2110-2112 2115 2119-211D 2124
2126 2128 212A-212D 2130-2133 213E-213F 2145 2160-216F 2183 24B6-24CF 2C00-2C2E 2C60 2C62-2C64 2C67 2C69 2C6B 2C6D-2C70
2C72 2C75 2C7E-2C80 2C82 2C84 2C86 2C88 2C8A 2C8C 2C8E 2C90 2C92 2C94 2C96 2C98 2C9A 2C9C 2C9E 2CA0 2CA2 2CA4
2CA6 2CA8 2CAA 2CAC 2CAE 2CB0 2CB2 2CB4 2CB6 2CB8 2CBA 2CBC 2CBE 2CC0 2CC2 2CC4 2CC6 2CC8 2CCA 2CCC 2CCE 2CD0
2CD2 2CD4 2CD6 2CD8 2CDA 2CDC 2CDE 2CE0 2CE2 2CEB 2CED 2CF2 A640 A642 A644 A646 A648 A64A A64C A64E A650 A652
A654 A656 A658 A65A A65C A65E A660 A662 A664 A666 A668 A66A A66C A680 A682 A684 A686 A688 A68A A68C A68E A690
A692 A694 A696 A722 A724 A726 A728 A72A A72C A72E A732 A734 A736 A738 A73A A73C A73E A740 A742 A744 A746 A748
A74A A74C A74E A750 A752 A754 A756 A758 A75A A75C A75E A760 A762 A764 A766 A768 A76A A76C A76E A779 A77B
A77D-A77E A780 A782 A784 A786 A78B A78D A790 A792 A7A0 A7A2 A7A4 A7A6 A7A8 A7AA FF21-FF3A
"""


def _class_body(table: str) -> str:
    """Regex character-class body (no brackets) for a table of ``XXXX`` / ``XXXX-YYYY`` hex ranges."""
    parts = []
    for item in table.split():  # literal characters: much faster for re to parse than \\u escapes
        lo, _, hi = item.partition("-")
        parts.append(re.escape(chr(int(lo, 16))) + ("-" + re.escape(chr(int(hi, 16))) if hi else ""))
    return "".join(parts)


def _ci(word: str) -> str:
    """A literal matched case-insensitively (JFlex ``%caseless`` applies to literals, never to classes;
    like Java's case folding it lets ``s`` match U+017F, ``k`` U+212A and ``i`` U+0130/U+0131)."""
    return "(?i:" + re.escape(word) + ")"


# ----------------------------------------------------------------------------------------------------
# Character classes and macros of PTBLexer.flex (3.4.1), as Python regular expressions
# ----------------------------------------------------------------------------------------------------
_JL = _class_body(_LETTER_RANGES)          # [:letter:]
_JD = _class_body(_DIGIT_RANGES)           # [:digit:] (= DIGIT: the NKo digits U+07C0-07C9 are in it)
_JU = _class_body(_UPPER_RANGES)           # [:uppercase:]
_LETTER_EXTRA = (
    r"\u00AD\u0237-\u024F\u02C2-\u02C5\u02D2-\u02DF\u02E5-\u02FF\u0300-\u036F\u0370-\u037D\u0384\u0385"
    r"\u03CF\u03F6\u03FC-\u03FF\u0483-\u0487\u04CF\u04F6-\u04FF\u0510-\u0525\u055A-\u055F\u0591-\u05BD"
    r"\u05BF\u05C1\u05C2\u05C4\u05C5\u05C7\u0615-\u061A\u063B-\u063F\u064B-\u065E\u0670\u06D6-\u06EF"
    r"\u06FA-\u06FF\u070F\u0711\u0730-\u074F\u0750-\u077F\u07A6-\u07B1\u07CA-\u07F5\u07FA\u0900-\u0903"
    r"\u093C\u093E-\u094E\u0951-\u0955\u0962-\u0963\u0981-\u0983\u09BC-\u09C4\u09C7\u09C8\u09CB-\u09CD"
    r"\u09D7\u09E2\u09E3\u0A01-\u0A03\u0A3C\u0A3E-\u0A4F\u0A81-\u0A83\u0ABC-\u0ACF\u0B82\u0BBE-\u0BC2"
    r"\u0BC6-\u0BC8\u0BCA-\u0BCD\u0C01-\u0C03\u0C3E-\u0C56\u0D3E-\u0D44\u0D46-\u0D48\u0E30-\u0E3A"
    r"\u0E47-\u0E4E\u0EB1-\u0EBC\u0EC8-\u0ECD"
)
_LETTER_EXTRA = _LETTER_EXTRA.encode("ascii").decode("unicode_escape")  # literal characters, parsed faster
_SPACE_C = r" \t\u00A0\u2000-\u200A\u3000"
_NL_C = r"\r\n\u2028\u2029\x0b\x0c\x85"
SPACE = f"[{_SPACE_C}]"
SPACENL = rf"(?:\r\n|[{_SPACE_C}{_NL_C}])"
SPACENLS = SPACENL + "+"
JL = f"[{_JL}]"
JD = f"[{_JD}]"
JLD = f"[{_JL}{_JD}]"
SPLET = f"(?:&[aeiouAEIOU](?i:acute|grave|uml);)"
LET = f"(?:[{_JL}{_LETTER_EXTRA}]|{SPLET})"
LETD = f"(?:[{_JL}{_LETTER_EXTRA}{_JD}]|{SPLET})"
DIGIT = JD
WORD = f"{LET}{LETD}*(?:[.!?]{LET}{LETD}*)*"
SGML = (r"<(?:[!?][A-Za-z\-][^>\r\n]*|[A-Za-z][A-Za-z0-9_:.\-]*(?:[ ]+(?:[A-Za-z][A-Za-z0-9_:.\-]*[ ]*=[ ]*"
        r"""(?:'[^']*'|"[^"]*")|[A-Za-z][A-Za-z0-9_:.\-]*))*[ ]*/?|/[A-Za-z][A-Za-z0-9_:.\-]*)[ ]*>""")
NUM = f"(?:{DIGIT}*(?:[.:,\u00AD\u066B\u066C]{DIGIT}+)+|{DIGIT}+)"
APOS = f"(?:['\u0092\u2019]|{_ci('&apos;')})"
APOSETC = f"(?:{APOS}|[`\u0091\u2018\u201B])"
REDAUX = f"{APOS}(?:[msdMSD]|(?i:re|ve|ll))"
SREDAUX = f"(?i:n){APOSETC}(?i:t)"
SWORD = r"[A-Za-z\u00AD]*[A-MO-Za-mo-z]\u00AD*"
HYPHEN = r"[\-_\u058A\u2010\u2011]"
THING = (f"(?:[dDoOlL]{APOSETC}{JLD})?{JLD}+(?:{HYPHEN}(?:[dDoOlL]{APOSETC}{JLD})?{JLD}+)*")
THINGA = f"[A-Z]+(?:(?:[+&]|{_ci('&amp;')})[A-Z]+)+"
THING3 = r"[A-Za-z0-9]+(?:-[A-Za-z]+){0,2}(?:\\?/[A-Za-z0-9]+(?:-[A-Za-z]+){0,2}){1,2}"
ACRO_SPECIAL = (r"(?i:canada|sino|korean|eu|japan|non)-(?i:u)\.(?i:s)|(?i:u)\.(?i:s)\.-(?:(?i:u)\.(?i:k)|"
                r"(?i:u)\.(?i:s)\.(?i:s)\.(?i:r))")
ACRO = f"(?:{ACRO_SPECIAL}|[A-Za-z](?:\\.[A-Za-z])*)"
ACRO2 = f"(?:{ACRO_SPECIAL}|[A-Za-z](?:\\.[A-Za-z])+)"
HTHING = f"[A-Za-z0-9][A-Za-z0-9.,\u00AD]*(?:-(?:{ACRO2}\\.|[A-Za-z0-9\u00AD]+))+"
FILENAME_EXT = ("(?i:docx|doc|bat|bmp|class|cgi|cpp|c|dll|exe|gif|gz|html|htm|h|jar|java|jpeg|jpg|mov|mp3|pdf|php|"
                "pl|png|ppt|ps|py|sql|tar|txt|wav|xml|x|zip)")
FILENAME = f"{LETD}+(?:[.]{LETD}+)*[.]{FILENAME_EXT}"
ABMONTH = "(?i:jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)"
ABDAYS = "(?i:mon|tue|tues|wed|thu|thurs|fri)"
ABSTATE = ("(?:(?i:ala|ariz)|A(?i:z)|A(?i:rk)|(?i:calif|colo|conn|ct|dak)|D(?i:el)|(?i:fla|ga)|I(?i:ll)|"
           "(?i:ind|kans?|ky)|L(?i:a)|M(?i:ass)|(?i:md|mich|minn)|M(?i:iss)|(?i:mo|mont|neb|nev|okla)|O(?i:re)|"
           "P(?i:a)|(?i:penn|tenn)|T(?i:ex)|(?i:va|vt)|W(?i:ash)|(?i:wisc?|wyo))")
ABCOMP = "(?:(?i:inc|cos?|corp)|(?i:pp?t)[ye](?i:s?)|(?i:ltd|plc|rt|bancorp|bhd|assn|univ|intl|sys))"
ABNUM = "(?i:tel|est|ext|sq)"
ABPTIT = r"(?i:jr|sr|bros|(?:ed|ph)\.d|blvd|rd|esq)"
ABBREV1 = f"(?:{ABMONTH}|{ABDAYS}|{ABSTATE}|{ABCOMP}|{ABNUM}|{ABPTIT}|(?i:etc|al|seq|bldg))\\."
ABTITLE = ("(?:(?i:mr|mrs|ms)|M(?i:iss)|(?i:drs?|profs?|sens?|reps?|attys?|lt|col|gen|messrs|govs?|adm|rev|maj|sgt|"
           "cpl|pvt|capt|ste?|ave|pres|lieut|hon|brig|co?mdr|pfc|spc|supts?|det|mt|ft|adj|adv|asst|assoc|ens|insp|"
           "mlle|mme|msgr|sfc))")
ABCOMP2 = "(?i:invt|elec|natl|m[ft]g|dept)"
_ABBREV4_PARTS = (ABTITLE, "(?i:vs|alex|wm|jos|cie)", "(?i:a\\.k\\.a)", "(?i:cf|treas|ph)", ACRO, ABCOMP2)
ABBREV4 = "(?:" + "|".join(_ABBREV4_PARTS) + ")"
ABBREV3 = "(?i:ca|figs?|prop|nos?|art|bldg|pp|op)\\."
PHONE_1 = (r"(?:\([0-9]{2,3}\)[ \u00A0]?|(?:\+\+?)?(?:[0-9]{2,4}[\- \u00A0])?[0-9]{2,4}[\- \u00A0])"
           r"[0-9]{3,4}[\- \u00A0]?[0-9]{3,5}")
PHONE_2 = r"(?:(?:\+\+?)?[0-9]{2,4}\.)?[0-9]{2,4}\.[0-9]{3,4}\.[0-9]{3,5}"
QUOTE_CHARS = "`\u2018\u2019\u201A\u201B\u201C\u201D\u0091\u0092\u0093\u0094\u201E\u201F\u2039\u203A\u00AB\u00BB"
SMILEY = r"[<>]?[:;=][\-o*']?[()DPdpO\\{@|\[\]]"
_AS = r"[\^x=~<>]"
ASIANSMILEY = (_AS + r"\.\[\^(?i:x)=~<>\]|[\-\^x=~<>']_[\-\^x=~<>']|\([\-\^x=~<>'][_.]?[\-\^x=~<>']\)|"
               r"\([\^x=~<>']-[\^x=~<>'`]\)")
MISCSYMBOL = ("[+%&~\\^|\\\\\u00A6\u00A7\u00A8\u00A9\u00AC\u00AE\u00AF\u00B0-\u00B3\u00B4-\u00BA\u00D7\u00F7\u0387"
              "\u05BE\u05C0\u05C3\u05C6\u05F3\u05F4\u0600-\u0603\u0606-\u060A\u060C\u0614\u061B\u061E\u066A\u066D"
              "\u0703-\u070D\u07F6\u07F7\u07F8\u0964\u0965\u0E4F\u1FBD\u2016\u2017\u2020-\u2023\u2030-\u2038\u203B"
              "\u203E-\u2042\u2044\u207A-\u207F\u208A-\u208E\u2100-\u214F\u2190-\u21FF\u2200-\u2BFF\u3012\u30FB"
              "\uFF01-\uFF0F\uFF1A-\uFF20\uFF3B-\uFF40\uFF5B-\uFF65]")
ACRONYM_NEXT = ("(?:A(?i:bout)|A(?i:ccording)|A(?i:dditionally)|A(?i:fter)|A(?i:n)|A|A(?i:s)|A(?i:t)|B(?i:ut)|"
                "E(?i:arlier)|H(?i:e)|H(?i:er)|H(?i:ere)|H(?i:owever)|I(?i:f)|I(?i:n)|I(?i:t)|L(?i:ast)|M(?i:any)|"
                "M(?i:ore)|M(?i:r)\\.|M(?i:s)\\.|N(?i:ow)|O(?i:nce)|O(?i:ne)|O(?i:ther)|O(?i:ur)|S(?i:he)|S(?i:ince)|"
                "S(?i:o)|S(?i:ome)|S(?i:uch)|T(?i:hat)|T(?i:he)|T(?i:heir)|T(?i:hen)|T(?i:here)|T(?i:hese)|T(?i:hey)|"
                "T(?i:his)|W(?i:e)|W(?i:hen)|W(?i:hile)|W(?i:hat)|Y(?i:et)|Y(?i:ou)|" + SGML + ")")
SENTEND = f"{SPACENL}(?:{SGML}|{SPACENL}|[{_JU}])"
INSENTP = r"[,;:\u3001]"
URL_END = "[^ \\t\\n\\f\\r\"<>|.!?(){},\\-]"
_ASTRAL_C = "[\U00010000-\U0010FFFF]"
# JFlex reads UTF-16 code units: a character outside the BMP is two units, which alone can fill the
# pattern "one or more of [^...], then one of [^...]" (hence the second variants below). And a
# backtracking regex gives the first match, not the longest: each variant is tried on its own.
_URL_BODY = "[^ \\t\\n\\f\\r\"<>|(){}]"
FULLURL = [f"(?i:https?)://{_URL_BODY}+{URL_END}", f"(?i:https?)://{_URL_BODY}*{_ASTRAL_C}"]
_PATH_BODY = "[^ \\t\\n\\f\\r\"<>|()]"
_URL_PATHS = ("", f"/{_PATH_BODY}+{URL_END}", f"/{_PATH_BODY}*{_ASTRAL_C}")
_LIKELYURL_1 = "(?i:www)\\.(?:[^ \\t\\n\\f\\r\"<>|.!?(){},]+\\.)+[a-zA-Z]{2,4}"
_LIKELYURL_2 = "(?:[^ \\t\\n\\f\\r\"`'<>|.!?(){}\\x2c-\\x5f$]+\\.)+(?i:com|net|org|edu)"
LIKELYURL = [base + path for base in (_LIKELYURL_1, _LIKELYURL_2) for path in _URL_PATHS]
_EMAIL_C = "[^ \\t\\n\\f\\r\"<>|(){}.\u00A0]"
EMAIL = (f"(?:(?i:&lt;)|<)?[a-zA-Z0-9][^ \\t\\n\\f\\r\"<>|()\u00A0{{}}]*@(?:{_EMAIL_C}+\\.)*{_EMAIL_C}+"
         "(?:(?i:&gt;)|>)?")
LDOTS_1 = r"\.{3,5}"
LDOTS_2 = r"(?:\.[ \u00A0]){2,4}\."


# ----------------------------------------------------------------------------------------------------
# Token normalisations done by the actions of PTBLexer.flex (ptb3Escaping defaults of 3.4.1; americanize
# and escapeForwardSlashAsterisk are off, splitAssimilations is on)
# ----------------------------------------------------------------------------------------------------
def _no_soft_hyphens(s: str) -> str:
    if "\u00AD" not in s:
        return s
    return s.replace("\u00AD", "") or "-"


_AMP = re.compile("(?i:&amp;)")
_LEFT_SINGLE = re.compile("[\u0091\u2018\u201B\u2039]")
_RIGHT_SINGLE = re.compile("[\u0092\u2019\u203A]")
_LEFT_DOUBLE = re.compile("[\u0093\u201C\u00AB]")
_RIGHT_DOUBLE = re.compile("[\u0094\u201D\u00BB]")
_SINGLE = re.compile("&apos;|'")
_DOUBLE = re.compile('"|&quot;')


def _latex_quotes(s: str, left: bool) -> str:
    """LaTeX-style quotes (the lexer's latexQuotes: ASCII quotes by guessed side, curly ones by shape)."""
    s = _SINGLE.sub("`" if left else "'", s)
    s = _DOUBLE.sub("``" if left else "''", s)
    s = _LEFT_SINGLE.sub("`", s)
    s = _RIGHT_SINGLE.sub("'", s)
    s = _LEFT_DOUBLE.sub("``", s)
    return _RIGHT_DOUBLE.sub("''", s)


_CURRENCY = str.maketrans({"\u00A2": "cents", "\u00A3": "#", "\u0080": "$", "\u00A4": "$", "\u20A0": "$",
                           "\u20AC": "$"})
_FRACTIONS = str.maketrans({"\u00BC": "1/4", "\u00BD": "1/2", "\u00BE": "3/4", "\u2153": "1/3", "\u2154": "2/3"})
_PARENS = str.maketrans({"(": "-LRB-", ")": "-RRB-"})
_BRACKETS = {"{": "-LCB-", "}": "-RCB-", "[": "-LSB-", "]": "-RSB-", "(": "-LRB-", ")": "-RRB-"}

# Action codes
(_TOK, _PUSH, _SGML, _DASH, _AMPN, _SOFT, _QUOTE_R, _QUOTE_L, _NBSP, _FRAC2, _CURR, _ACRONYM, _ABBREV1, _PHONE,
 _LT, _GT, _PARENS_A, _BRACKET, _HYPHENS, _ELLIPSIS, _SKIP, _NEWLINE) = range(22)

#: The lexical rules of PTBLexer.flex in their order (the order breaks ties between equally long
#: matches). Each: (patterns, action, argument); the longest match of any pattern is the rule's match;
#: a pattern with a group "a" has a trailing context: only group "a" is the token.
_RULE_SPECS = [
    ([r"[cC]\+\+"], _TOK, None),
    ([r"[cCfF]#"], _TOK, None),
    ([_ci("cannot")], _PUSH, 3),
    (["'" + _ci("twas")], _PUSH, 3),
    (["'" + _ci("tis")], _PUSH, 2),
    ([_ci("gonna"), _ci("gotta"), _ci("lemme"), _ci("gimme"), _ci("wanna")], _PUSH, 2),
    ([SGML], _SGML, None),
    ([r"&(?i:md|mdash|ndash);", "[\u0096\u0097\u2013\u2014\u2015]"], _DASH, None),
    ([_ci("&amp;")], _AMPN, None),
    ([r"&(?i:ht|tl|ur|lr|qc|ql|qr|odq|cdq|#[0-9]+);"], _TOK, None),
    ([f"(?P<a>{WORD}){REDAUX}"], _SOFT, None),
    ([f"(?P<a>{SWORD}){SREDAUX}"], _SOFT, None),
    ([WORD], _SOFT, None),
    ([f"{APOS}(?i:n){APOS}?", f"[lLdDjJ]{APOS}", f"(?i:dunkin){APOS}", f"(?i:somethin){APOS}", f"(?i:ol){APOS}",
      f"{APOS}(?i:em)", f"[A-HJ-XZn]{APOSETC}{JL}{{2}}{JL}*", f"{APOS}[2-9]0(?i:s)", f"{APOS}(?i:till?)",
      f"{JL}+[aeiouyAEIOUY]{APOSETC}[aeiouA-Z]{JL}*", f"{APOS}(?i:cause)", r"(?i:cont'd)\.?",
      "(?i:'twas|nor'easter|c'mon|e'er|s'mores|ev'ry|li'l|nat'l)", f"(?i:o){APOSETC}(?i:o)"], _TOK, None),
    ([f"(?P<a>(?i:y){APOS}){JL}"], _TOK, None),
    (FULLURL, _TOK, None),
    (LIKELYURL, _TOK, None),
    ([EMAIL], _TOK, None),
    ([r"@[a-zA-Z_][a-zA-Z_0-9]*", f"#{LET}+"], _TOK, None),
    ([f"(?P<a>{REDAUX})[^A-Za-z]"], _QUOTE_R, None),
    ([f"(?P<a>{SREDAUX})[^A-Za-z]"], _QUOTE_R, None),
    ([f"{DIGIT}{{1,2}}[\\-/]{DIGIT}{{1,2}}[\\-/]{DIGIT}{{2,4}}"], _TOK, None),
    ([f"[\\-+]?{NUM}"], _SOFT, None),
    (["[\u207A\u207B\u208A\u208B]?(?:[\u2070\u00B9\u00B2\u00B3\u2074-\u2079]+|[\u2080-\u2089]+)"], _TOK, None),
    ([f"(?:{DIGIT}{{1,4}}[\\- \u00A0])?{DIGIT}{{1,4}}(?:\\\\?/|\u2044){DIGIT}{{1,4}}"], _NBSP, None),
    (["[\u00BC\u00BD\u00BE\u2153-\u215E]"], _FRAC2, None),
    ([r"-(?i:rrb|lrb|rcb|lcb|rsb|lsb)-", r"(?i:c\.d\.s|pro-|anti-)", r"(?i:s)(?:&|(?i:&amp;))(?i:p-500)",
      r"(?i:s)(?:&|(?i:&amp;))(?i:ls)", f"(?i:cap){APOS}(?i:n)", f"(?i:c){APOS}(?i:est)"], _AMPN, None),
    ([THING3], _TOK, None),
    ([r"[A-Z]*\$|#"], _TOK, None),
    (["[\u00A2\u00A3\u00A4\u00A5\u0080\u20A0\u20AC\u060B\u0E3F\u20A4\uFFE0\uFFE1\uFFE5\uFFE6]"], _CURR, None),
    ([f"(?P<a>{ACRO}\\.){SPACENLS}{ACRONYM_NEXT}{SPACENL}"], _ACRONYM, None),
    ([f"(?P<a>{ABBREV3}){SPACENL}?{JD}"], _TOK, None),
    ([f"(?P<a>(?i:pt)[eyEY]\\.|(?i:co)\\.){SPACE}(?i:ltd|lim)"], _TOK, None),
    ([f"(?P<a>{ABBREV1}){SENTEND}"], _ABBREV1, None),
    ([f"(?P<a>{ABBREV1})(?:[\U00010000-\U0010FFFF]|(?s:..))"], _TOK, None),
    ([ABBREV1], _ABBREV1, None),
    ([f"{part}\\." for part in _ABBREV4_PARTS], _TOK, None),  # longest: "a.k.a.p.m." is ACRO, not a.k.a
    ([f"(?P<a>{ABBREV4}){SPACE}"], _TOK, None),
    ([f"(?P<a>{ACRO}){SPACENL}"], _TOK, None),
    ([f"(?P<a>{APOS}[0-9][0-9]){SPACENL}"], _TOK, None),
    ([f"(?P<a>{FILENAME})(?:{SPACENL}|[.?!,])"], _TOK, None),
    ([f"(?P<a>{WORD}\\.){INSENTP}"], _SOFT, None),
    ([PHONE_1, PHONE_2], _PHONE, None),
    ([f"(?P<a>\"|{_ci('&quot;')})[A-Za-z0-9$]"], _QUOTE_L, None),
    ([f"\"|{_ci('&quot;')}"], _QUOTE_R, None),
    (["\x7f"], _SKIP, None),
    (["<|" + _ci("&lt;")], _LT, None),
    ([">|" + _ci("&gt;")], _GT, None),
    ([f"(?P<a>{SMILEY})[^A-Za-z0-9]"], _PARENS_A, None),
    ([ASIANSMILEY], _PARENS_A, None),
    ([r"\{"], _BRACKET, None),
    ([r"\}"], _BRACKET, None),
    ([r"\["], _BRACKET, None),
    ([r"\]"], _BRACKET, None),
    ([r"\("], _BRACKET, None),
    ([r"\)"], _BRACKET, None),
    ([r"-+"], _HYPHENS, None),
    ([LDOTS_1, LDOTS_2, "[\u0085\u2026]"], _ELLIPSIS, None),
    ([r"@+|#+|_+"], _TOK, None),
    ([r"\*+|(?:\\\*){1,3}"], _TOK, None),
    ([INSENTP], _TOK, None),
    ([r"[?!]+"], _TOK, None),
    (["[.\u00A1\u00BF\u037E\u0589\u061F\u06D4\u0700-\u0702\u07FA\u3002]"], _TOK, None),
    (["="], _TOK, None),
    (["/"], _TOK, None),
    ([f"(?P<a>{HTHING}\\.){INSENTP}"], _SOFT, None),
    ([HTHING], _SOFT, None),
    ([f"(?P<a>{THING}\\.){INSENTP}"], _TOK, None),
    ([THING], _TOK, None),
    ([f"(?P<a>{THINGA}\\.){INSENTP}"], _AMPN, None),
    ([THINGA], _AMPN, None),
    ([r"(?P<a>')[A-Za-z][^ \t\n\r\u00A0]"], _QUOTE_L, None),
    ([REDAUX], _QUOTE_R, None),
    ([SREDAUX], _QUOTE_R, None),
    ([APOS, "''", f"[{QUOTE_CHARS}]{{1,2}}"], _QUOTE_R, None),
    (["<<|>>"], _TOK, None),
    ([MISCSYMBOL], _TOK, None),
    ([f"\x00|{SPACE}+|[\u200B\u200E\u200F\uFEFF]"], _SKIP, None),
    ([r"\r\n|[\r\n\u2028\u2029\x0b\x0c\x85]"], _NEWLINE, None),
    ([_ci("&nbsp;")], _SKIP, None),
]


# ----------------------------------------------------------------------------------------------------
# The scanner
# ----------------------------------------------------------------------------------------------------
#: Characters that Python's case-insensitive matching (like JFlex's %caseless) also folds to ASCII.
_FOLDS = {"\u017f": "sS", "\u212a": "kK", "\u0131": "iI", "\u0130": "iI"}


_VARIANTS: dict = {}  # character -> code points it may match case-insensitively (see _first_chars)


def _first_chars(parsed):
    """Predicate ``ch -> bool``: can the parsed pattern match a string that starts with ``ch``? (A
    superset test; used only to skip rules that cannot match here.)"""
    tests: list = []

    def variants(ch: str, ignorecase: bool) -> frozenset:
        if not ignorecase:
            return frozenset([ord(ch)])
        found = _VARIANTS.get(ch)
        if found is None:
            out = {ch, ch.lower(), ch.upper(), ch.casefold()}  # a superset of re's case-insensitive equivalents
            found = frozenset({ord(c) for c in out if len(c) == 1} | {ord(c) for c in _FOLDS.get(ch, "")})
            _VARIANTS[ch] = found
        return found

    def cls_test(items, ignorecase):
        negate = bool(items) and items[0][0] is _sre_c.NEGATE
        if negate and ignorecase:
            return lambda ch: True  # (not used by the rules) be permissive
        ranges = []
        for op, av in items[1:] if negate else items:
            if op is _sre_c.LITERAL:
                ranges.append((av, av))
            elif op is _sre_c.RANGE:
                ranges.append(av)
            else:  # a category: be permissive
                return lambda ch: True
        ranges.sort()
        los, his = [], []  # merged ranges, for a binary search
        for lo, hi in ranges:
            if his and lo <= his[-1] + 1:
                his[-1] = max(his[-1], hi)
            else:
                los.append(lo)
                his.append(hi)

        def member(c: int) -> bool:
            k = bisect.bisect_right(los, c) - 1
            return k >= 0 and c <= his[k]

        if negate:
            return lambda ch: not member(ord(ch))
        if not ignorecase:
            return lambda ch: member(ord(ch))
        return lambda ch: any(member(c) for c in variants(ch, True))

    def seq(items, ignorecase) -> bool:
        """Add the first-character tests of a sequence; return whether it can match the empty string."""
        for op, av in items:
            if op is _sre_c.LITERAL:
                if ignorecase:
                    tests.append(lambda ch, av=av: av in variants(ch, True))
                else:
                    tests.append(lambda ch, av=av: ord(ch) == av)
                return False
            if op is _sre_c.NOT_LITERAL:
                tests.append(lambda ch, av=av: ord(ch) != av)
                return False
            if op is _sre_c.IN:
                tests.append(cls_test(av, ignorecase))
                return False
            if op is _sre_c.ANY:
                tests.append(lambda ch: True)
                return False
            if op is _sre_c.BRANCH:
                nullable = False
                for alt in av[1]:
                    nullable |= seq(alt, ignorecase)
                if not nullable:
                    return False
            elif op is _sre_c.SUBPATTERN:
                group, add_flags, del_flags, sub = av
                ic = (ignorecase or bool(add_flags & re.IGNORECASE)) and not (del_flags & re.IGNORECASE)
                if not seq(sub, ic):
                    return False
            elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT, getattr(_sre_c, "POSSESSIVE_REPEAT", None)):
                lo, _hi, sub = av
                if not seq(sub, ignorecase) and lo > 0:
                    return False
            elif op in (_sre_c.AT, _sre_c.ASSERT, _sre_c.ASSERT_NOT):
                continue
            else:
                tests.append(lambda ch: True)
                return False
        return True

    if seq(parsed, False):
        return lambda ch: True
    return lambda ch: any(t(ch) for t in tests)


class _Rule:
    __slots__ = ("index", "patterns", "action", "arg", "first", "trailing")

    def __init__(self, index, patterns, action, arg):
        self.index = index
        parsed = [_sre_parse.parse(p) for p in patterns]
        # compiled when first tried (compiling the large letter classes is the slow part)
        self.patterns = [_LazyPattern(p, t, self, k) for k, (p, t) in enumerate(zip(patterns, parsed))]
        self.action = action
        self.arg = arg
        tests = [_first_chars(t) for t in parsed]
        self.first = lambda ch: any(t(ch) for t in tests)
        self.trailing = any(t.state.groupdict for t in parsed)


class _LazyPattern:
    """A rule's pattern, compiled at its first ``match``, which then replaces it in the rule."""
    __slots__ = ("source", "parsed", "rule", "k")

    def __init__(self, source, parsed, rule, k):
        self.source, self.parsed, self.rule, self.k = source, parsed, rule, k

    def match(self, text, pos):
        try:  # the parsed pattern (parsing the large letter classes twice is slow)
            compiled = _sre_compile.compile(self.parsed)
        except Exception:  # pragma: no cover - a Python whose private re API differs
            compiled = re.compile(self.source)
        self.rule.patterns[self.k] = compiled
        return compiled.match(text, pos)


def _ascii_body(table: str) -> str:
    """The ASCII part of a table of hex ranges, as a regex character-class body."""
    parts = []
    for item in table.split():
        lo, _, hi = item.partition("-")
        lo, hi = int(lo, 16), int(hi or lo, 16)
        if lo < 0x80:
            parts.append(re.escape(chr(lo)) + ("-" + re.escape(chr(min(hi, 0x7F))) if min(hi, 0x7F) > lo else ""))
    return "".join(parts)


class _RuleSet:
    """The rules of :data:`_RULE_SPECS`, parsed and compiled on first use, and for each first character the
    rules that can match there (in order). ``ascii_only``: the large Unicode classes ``[:letter:]``,
    ``[:digit:]``, ``[:uppercase:]`` and the extra letter characters are cut down to their ASCII members,
    which matches exactly as the full rules on ASCII text and is much cheaper to parse and compile."""

    def __init__(self, ascii_only: bool):
        self.ascii_only = ascii_only
        self.rules: list = []
        self.dispatch: dict[str, tuple] = {}

    def _build(self) -> list:
        specs = _RULE_SPECS
        if self.ascii_only:
            cut = [(_JL, _ascii_body(_LETTER_RANGES)), (_LETTER_EXTRA, ""), (_JU, _ascii_body(_UPPER_RANGES)),
                   (_JD, _ascii_body(_DIGIT_RANGES))]

            def ascii_pattern(p: str) -> str:
                for body, small in cut:
                    p = p.replace(body, small)
                return p

            specs = [([ascii_pattern(p) for p in patterns], action, arg) for patterns, action, arg in specs]
        return [_Rule(i, *spec) for i, spec in enumerate(specs)]

    def rules_for(self, ch: str) -> tuple:
        """The rules (in order) whose match can start with character ``ch`` (cached per character)."""
        rules = self.dispatch.get(ch)
        if rules is None:
            key = ch if ch <= "\uffff" else "\U00010000"  # every astral character behaves alike
            rules = self.dispatch.get(key)
            if rules is None:
                if not self.rules:
                    self.rules = self._build()  # replaced whole: thread-safe
                rules = tuple((r.patterns, r) for r in self.rules if r.first(key))
                self.dispatch[key] = rules
            self.dispatch[ch] = rules
        return rules


#: The full rules (any text) and the same rules for ASCII text (a text of ASCII characters only).
_FULL_RULES = _RuleSet(False)
_ASCII_RULES = _RuleSet(True)


_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")
#: An ASCII word followed by a space or a line end: whatever rule wins there, the token is the word,
#: except for the "cannot" and "gonna" rules, which split it.
#: (also when the word is followed by a possessive ``'s`` and a space or line end: the rule WORD REDAUX then
#: matches longest, or ties with a later rule, and gives the word)
#: And when it is followed by a period and a line end, unless it is one letter or an abbreviation (see
#: _plain_line): the period then cannot join the word in any rule.
_FAST_WORD = re.compile("[A-Za-z]+(?=[ \n]|'s[ \n]|\\.\n)")
#: A possessive ``'s`` followed by a space or line end: the REDAUX rule with its one-character trailing
#: context matches longest (3), its token is ``'s``.
_FAST_POSSESSIVE = re.compile("'s(?=[ \n])")
_SPACES = re.compile(SPACE + "+")
_ASSIMILATIONS = frozenset(["cannot", "gonna", "gotta", "lemme", "gimme", "wanna"])
_NL_TOKEN = "\n"  # stands for the lexer's *NL* token


def _big_class_members() -> list:
    """Sorted, merged code point ranges [(lo, hi)...] of the Unicode classes that :class:`_RuleSet` cuts
    down to ASCII: ``[:letter:]``, ``[:digit:]``, ``[:uppercase:]`` and the extra letter characters."""
    ranges = []
    for table in (_LETTER_RANGES, _DIGIT_RANGES, _UPPER_RANGES):
        for item in table.split():
            lo, _, hi = item.partition("-")
            ranges.append((int(lo, 16), int(hi or lo, 16)))
    extra = _LETTER_EXTRA
    i = 0
    while i < len(extra):  # a class body: characters and "a-b" ranges (no escapes left)
        if i + 2 < len(extra) and extra[i + 1] == "-":
            ranges.append((ord(extra[i]), ord(extra[i + 2])))
            i += 3
        else:
            ranges.append((ord(extra[i]), ord(extra[i])))
            i += 1
    ranges.sort()
    merged = [list(ranges[0])]
    for lo, hi in ranges[1:]:
        if lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


_BIG_STARTS: list = []
_BIG_ENDS: list = []
_IN_BIG_CLASS: dict = {}


def _text_kind(text: str) -> tuple:
    """(rules_for, astral) for scanning ``text``: the ASCII rules if no character of the text is a non-ASCII
    member of the cut-down classes (they then match exactly as the full rules), else the full rules; and
    whether the text has characters outside the BMP (lengths are then compared in UTF-16 code units)."""
    if text.isascii():  # O(1) in CPython
        return _ASCII_RULES.rules_for, False
    if not _BIG_STARTS:
        members = _big_class_members()
        _BIG_ENDS[:] = [hi for _lo, hi in members]
        _BIG_STARTS[:] = [lo for lo, _hi in members]
    full = False
    memo = _IN_BIG_CLASS
    for ch in set(text):
        if ch > "\x7f":
            inside = memo.get(ch)
            if inside is None:
                k = bisect.bisect_right(_BIG_STARTS, ord(ch)) - 1
                inside = memo[ch] = k >= 0 and ord(ch) <= _BIG_ENDS[k]
            if inside:
                full = True
                break
    return (_FULL_RULES if full else _ASCII_RULES).rules_for, _ASTRAL.search(text) is not None


def _scan(text: str, pos: int, stop: int, out: list, kind: tuple | None = None) -> int:
    """Append to ``out`` the tokens of ``text`` from ``pos`` until a token ends at or after ``stop``
    (a newline token at ``stop`` included); return the position reached. ``kind``: ``_text_kind(text)``
    (computed if None). Lengths are compared in UTF-16 code units when the text has characters outside
    the BMP, as in the Java lexer."""
    n = len(text)
    rules_for, astral = kind or _text_kind(text)
    fast_word = _FAST_WORD.match
    fast_possessive = _FAST_POSSESSIVE.match
    spaces = _SPACES.match
    while pos < n:
        ch = text[pos]
        if ch == " ":  # a run of spaces (any SPACE after the first, too, as the lexer's SPACES rule)
            pos = spaces(text, pos).end()
            if pos >= stop:
                return pos
            continue
        m = fast_word(text, pos)
        if (m is not None and m.group().lower() not in _ASSIMILATIONS
                and (text[m.end()] != "." or not _dotted_abbrev(m.group()))):
            # An ASCII word followed by a space or line end is a token by itself in every rule.
            out.append(m.group())
            pos = m.end()
            if pos >= stop:
                return pos
            continue
        if ch == "'" and fast_possessive(text, pos) is not None:
            out.append("'s")
            pos += 2
            if pos >= stop:
                return pos
            continue
        best_len = 0
        best = best_m = None
        for patterns, rule in rules_for(ch):
            for pat in patterns:
                m = pat.match(text, pos)
                if m is not None:
                    length = m.end() - pos
                    if astral:
                        length += len(_ASTRAL.findall(text, pos, m.end()))
                    if length > best_len:
                        best_len, best, best_m = length, rule, m
        if best is None:  # untokenisable character: dropped (the Java lexer logs a warning)
            pos += 1
            if pos >= stop:
                return pos
            continue
        m = best_m
        end = m.end("a") if best.trailing else m.end()
        tok = text[pos:end]
        action = best.action
        if action is _TOK:
            pass
        elif action is _SOFT:
            tok = _no_soft_hyphens(tok)
        elif action is _PUSH:
            end -= best.arg
            tok = text[pos:end]
        elif action is _QUOTE_R:
            tok = _latex_quotes(tok, False)
        elif action is _QUOTE_L:
            tok = _latex_quotes(tok, True)
        elif action is _SKIP:
            tok = None
        elif action is _NEWLINE:
            tok = _NL_TOKEN
        elif action is _SGML or action is _NBSP:
            tok = tok.replace(" ", "\u00A0")
        elif action is _DASH:
            tok = "--"
        elif action is _AMPN:
            tok = _AMP.sub("&", tok)
        elif action is _FRAC2:
            tok = tok.translate(_FRACTIONS)
        elif action is _CURR:
            tok = tok.translate(_CURRENCY)
        elif action is _ACRONYM:
            if len(tok) == 2:  # "I." before "The": the letter, then the period on its own
                end -= 1
                tok = tok[0]
            else:  # "U.S." before "The": the acronym, then the period again
                end -= 1
        elif action is _ABBREV1:  # sentence-final "etc.": the abbreviation, then the period again
            end -= 1
        elif action is _PHONE:
            tok = tok.replace(" ", "\u00A0").translate(_PARENS)
        elif action is _LT:
            tok = "<"
        elif action is _GT:
            tok = ">"
        elif action is _PARENS_A:
            tok = tok.translate(_PARENS)
        elif action is _BRACKET:
            tok = _BRACKETS[tok]
        elif action is _HYPHENS:
            if 3 <= len(tok) <= 4:
                tok = "--"
        elif action is _ELLIPSIS:
            tok = "..."
        if tok is not None:
            out.append(tok)
        pos = end
        if pos >= stop:
            return pos
    return pos


# ----------------------------------------------------------------------------------------------------
# Captions: context, cache, output lines as pycocoevalcap builds them
# ----------------------------------------------------------------------------------------------------
#: A caption ending like this may be tokenised differently depending on the next caption (one-letter
#: acronyms, abbreviations before numbers, sentence-final abbreviations).
_TAIL_SENSITIVE = re.compile(r"[A-Za-z]\.\Z")
#: What of the next caption can matter: the rules that look across the line end read at most a word
#: (``Additionally``) and a space, or an SGML tag, or one digit / capital / space.
_NEXT_SIGNATURE = re.compile(f"(?:{ACRONYM_NEXT}){SPACENL}|{SGML}|{JD}|[{_JU}]|{SPACENL}")
_HAS_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _prepare(text: str) -> str:
    """The caption as the Java wrapper writes it: line breaks -> spaces, stripped, "" -> "."."""
    if _HAS_LINE_BREAK.search(text):
        text = text.translate(_LINE_BREAKS)
    return text.strip() or "."


def _is_cased(ch: str) -> bool:
    return ch.islower() or ch.isupper() or ch.istitle()


def _in_word(ch: str) -> bool:
    return ch.isalnum() or unicodedata.category(ch)[0] == "M"


def _word_mid(token: str, j: int) -> bool:
    """Does ``token[j]`` (dash, connector, soft hyphen, U+2027, quote or period) continue a word, as Java's
    word break iterator sees it (a letter before it and after it)?"""
    ch = token[j]
    return ((unicodedata.category(ch) in ("Pd", "Pc") or ch in "\u00ad\u2027\"'.") and 0 < j < len(token) - 1
            and (token[j - 1].isalpha() or unicodedata.category(token[j - 1])[0] == "M") and token[j + 1].isalpha())


def _final_sigma(token: str, i: int) -> bool:
    """Java ``String.toLowerCase`` rule for U+03A3: final form when a cased letter precedes it and none
    follows it within the same word (java.lang.ConditionalSpecialCasing, word bounds by BreakIterator)."""
    j = i - 1
    while j >= 0 and (_in_word(token[j]) or _word_mid(token, j)):
        if _is_cased(token[j]):
            break
        j -= 1
    else:
        return False
    if j < 0:
        return False
    j = i + 1
    while j < len(token) and (_in_word(token[j]) or _word_mid(token, j)):
        if _is_cased(token[j]):
            return False
        j += 1
    return True


#: Capital letters that Python 3.11 (Unicode 14) lower-cases but Java 17 (Unicode 13) leaves as they are.
_NEWER_CAPITALS = re.compile("[\u2c2f\ua7c0\ua7d0\ua7d6\ua7d8\U00010570-\U0001057a\U0001057c-\U0001058a"
                             "\U0001058c-\U00010592\U00010594\U00010595]")


def _lower(token: str) -> str:
    """Java ``token.toLowerCase(Locale.ENGLISH)`` (Java 17): Python's ``str.lower`` except for the
    final-sigma rule and for the capitals newer than Java's Unicode 13."""
    if token.isascii():
        return token.lower()
    if "\u03a3" not in token and _NEWER_CAPITALS.search(token) is None:
        return token.lower()
    return "".join(("\u03c2" if _final_sigma(token, i) else "\u03c3") if ch == "\u03a3"
                   else ch if _NEWER_CAPITALS.match(ch) else ch.lower() for i, ch in enumerate(token))


def _postprocess(line: str) -> str:
    """pycocoevalcap's per-line step on the (already lower-cased) output line: ``rstrip``, split on
    single spaces, drop PUNCTUATIONS tokens, join with single spaces."""
    return " ".join(w for w in line.rstrip().split(" ") if w not in PUNCTUATIONS)


def _line_tokens(caption: str, following: str) -> list:
    """Raw tokens (not lower-cased) of a caption none of whose tokens crosses its line end; ``following``
    is the rest of the Java input after the caption's line end."""
    text = caption + "\n" + following
    out: list = []
    _scan(text, 0, len(caption), out)
    return out


def raw_tokens(text: str) -> list[str]:
    """The Java lexer's tokens for ``text`` (one caption, as is: no line-break replacement), before
    lower-casing and punctuation removal; a line end inside ``text`` gives a ``"\\n"`` token. For tests."""
    out: list = []
    _scan(text, 0, len(text), out)
    return out


def _may_span_lines(caption: str) -> bool:
    """An SGML tag with a quoted attribute value (``<a b='...``) may run past the line end."""
    i = caption.find("<")
    return i >= 0 and ("'" in caption[i:] or '"' in caption[i:])


_CACHE: dict = {}
_CACHE_MAX = 500_000


def _caption_line(caption: str, following: str) -> str:
    """Output line (lower-cased, punctuation removed) of a caption whose tokens stay on its line;
    ``following``: the rest of the Java input after the caption's line end (the next caption with its
    line end, or the sentinel)."""
    return _postprocess(" ".join(_lower(t) for t in _line_tokens(caption, following)))


#: A caption of ASCII words (hyphenated compounds allowed), each perhaps followed by one of . , ; : ! ?,
#: and lone such punctuation marks, separated by spaces. Its tokens are the words and the marks (which
#: pycocoevalcap removes), unless a word is "cannot", "gonna"... (split by the lexer) or a word before
#: an attached period is an abbreviation or a single letter (``Mr.``, ``etc.``, ``B.``): checked below.
_PLAIN_CHUNK = r"(?:[A-Za-z]+(?:-[A-Za-z]+)*[.,;:!?]?|[.,;:!?])"
_PLAIN = re.compile(f"{_PLAIN_CHUNK}(?: +{_PLAIN_CHUNK})*")
_PLAIN_WORDS = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*")
_PLAIN_LETTER_DOT = re.compile(r"[A-Za-z]\.")
_PLAIN_DOTTED = re.compile(r"([A-Za-z]+)\.(?= |\Z)")
_PLAIN_ABBREV = re.compile(f"{ABBREV1}|{ABBREV4}\\.|{ABBREV3}|(?i:pt)[eyEY]\\.|(?i:co)\\.")
_PLAIN_SPECIAL = re.compile(r"(?<![a-z-])(?:cannot|gonna|gotta|lemme|gimme|wanna)(?![a-z-])")  # on lower case


_ABBREV_MEMO: dict = {}


def _dotted_abbrev(word: str) -> bool:
    """Is ``word`` (ASCII letters) followed by a period a one-letter acronym or an abbreviation, whose
    tokens may depend on what follows?"""
    abbrev = _ABBREV_MEMO.get(word)
    if abbrev is None:
        if len(_ABBREV_MEMO) > 100_000:
            _ABBREV_MEMO.clear()
        abbrev = _ABBREV_MEMO[word] = len(word) == 1 or _PLAIN_ABBREV.fullmatch(word + ".") is not None
    return abbrev


def _plain_line(caption: str):
    """Output line of a plain caption (see :data:`_PLAIN`), or None if the caption is not plain."""
    if _PLAIN.fullmatch(caption) is None:
        return None
    low = caption.lower()
    if ("nn" in low or "tt" in low or "mm" in low) and _PLAIN_SPECIAL.search(low):
        return None
    if _PLAIN_LETTER_DOT.search(caption):
        for w in _PLAIN_DOTTED.findall(caption):
            if _dotted_abbrev(w):
                return None
    return " ".join(_PLAIN_WORDS.findall(low))


#: Batch form of the plain-caption test (:func:`_plain_batch`), on the batch's captions joined by line ends:
#: a character that is not allowed, a punctuation mark not followed by a space or line end, a hyphen not
#: between two letters, or an apostrophe that does not start a chunk ``'s`` (between spaces or line ends).
#: (One leading class, so that ``re`` skips letters and spaces quickly.)
_PLAIN_VIOLATION = re.compile(
    r"[^A-Za-z \n](?:(?<=[^A-Za-z .,;:!?\n'-])|(?<=[.,;:!?])[^ \n]|(?<=-)(?:[^A-Za-z]|(?<![A-Za-z]-))"
    r"|(?<=')(?:(?<![ \n]')|(?!s[ \n])))")
#: _PLAIN_SPECIAL without its look-behind (checked by hand on each rare hit), on lower case; one pattern per
#: doubled letter, so that ``re`` looks for that literal pair only.
_PLAIN_SPECIAL_AHEAD = [re.compile(r"nn(?:(?<=cann)ot|(?<=gonn)a|(?<=wann)a)(?![a-z-])"),
                        re.compile(r"tt(?<=gott)a(?![a-z-])"), re.compile(r"mm(?:(?<=lemm)e|(?<=gimm)e)(?![a-z-])")]
_LOWER_OR_HYPHEN = frozenset("abcdefghijklmnopqrstuvwxyz-")
#: On the reversed text: a period and the letters before it (reversed), as _PLAIN_DOTTED finds them.
_DOT_WORDS_REVERSED = re.compile(r"\.([A-Za-z]+)")
_DELETE_PUNCT = str.maketrans("", "", ".,;:!?")
_SPACE_RUN = re.compile("  +")
_FEW_LINES = 500
_REV_ABBREV_MEMO: dict = {}


def _plain_batch(texts: list, cache: dict) -> None:
    """Put in ``cache`` (raw caption -> output line) the output line of every plain caption among ``texts``
    (distinct raw captions); the others are left out. Plain: as for :func:`_plain_line` (same lines), and
    also with chunks ``'s`` (a possessive split off, as in Flickr8k's "a person 's hand": the lexer's
    token ``'s``, kept by pycocoevalcap, whatever the chunks around it). Done with a few passes of ``re``
    and ``str`` methods over all captions joined by line ends, instead of caption by caption."""
    big = "\n".join(texts)
    if not big.isascii():
        texts = list(filter(str.isascii, texts))
        big = "\n".join(texts)
    if big.count("\n") != len(texts) - 1:
        texts = [t for t in texts if "\n" not in t]
        big = "\n".join(texts)
    if not texts:
        return
    # The captions as the Java wrapper writes them (_prepare: stripped; the line breaks inside a caption
    # are left, and make it not plain); line k is big[starts[k]:starts[k + 1] - 1].
    stripped = list(map(str.strip, texts))
    big = "\n" + "\n".join(stripped) + "\n"
    starts = list(itertools.accumulate(map(operator.add, map(len, stripped), itertools.repeat(1)), initial=1))
    find_line = bisect.bisect_right
    bad = set()
    search = _PLAIN_VIOLATION.search
    m = search(big)
    while m is not None:
        k = find_line(starts, m.start()) - 1
        bad.add(k)
        m = search(big, starts[k + 1])
    low = big.lower()
    for pattern in _PLAIN_SPECIAL_AHEAD:
        for m in pattern.finditer(low):
            p = m.start() - 2  # the word's start: the doubled letter is its third and fourth
            if low[p - 1] not in _LOWER_OR_HYPHEN:  # p >= 1: big starts with a line end
                bad.add(find_line(starts, p) - 1)
    # Periods after a single letter or an abbreviation: found on the reversed text, where the word
    # before a period follows it.
    rev = big[::-1]
    memo = _REV_ABBREV_MEMO
    abbrevs = []
    for w in set(_DOT_WORDS_REVERSED.findall(rev)):
        abbrev = memo.get(w)
        if abbrev is None:
            if len(memo) > 100_000:
                memo.clear()
            abbrev = memo[w] = len(w) == 1 or _PLAIN_ABBREV.fullmatch(w[::-1] + ".") is not None
        if abbrev:
            abbrevs.append(w)
    if abbrevs:
        last = len(big) - 1
        pattern = re.compile(r"\.(?:" + "|".join(map(re.escape, abbrevs)) + ")(?![A-Za-z])")
        for m in pattern.finditer(rev):
            bad.add(find_line(starts, last - m.start()) - 1)
    out = low.translate(_DELETE_PUNCT)  # plain lines: words separated by spaces, perhaps several, or at the ends
    # Lines with several spaces in a row or a space at an end (after a lone punctuation mark): fixed one by
    # one when they are few, else by passes over the whole text.
    found = []
    many = False
    for needle, shift in (("  ", 0), (" \n", 0), ("\n ", 1)):
        i = out.find(needle)
        while i >= 0 and not many:
            found.append(i + shift)
            many = len(found) > _FEW_LINES
            i = out.find(needle, i + 1)
    if many:
        out = _SPACE_RUN.sub(" ", out).replace(" \n", "\n").replace("\n ", "\n")
    lines = out.split("\n")  # lines[k + 1]: line k
    if found and not many:
        line_starts = list(itertools.accumulate(map(operator.add, map(len, lines), itertools.repeat(1)), initial=0))
        for k in {find_line(line_starts, p) - 1 for p in found}:
            lines[k] = " ".join(lines[k].split())
    keep = [True] * len(texts)
    for k in bad:
        keep[k] = False
    cache.update(itertools.compress(zip(texts, itertools.islice(lines, 1, None)), keep))


def tokenize(texts: Sequence[str]) -> list[str]:
    """Tokenise captions exactly as ``ptb_tokenize_java`` (pycocoevalcap 1.2 + CoreNLP 3.4.1) does.

    Parameters
    ----------
    texts : sequence of str, length n
        Raw captions, any Unicode. As in the Java path, line-break characters (``\\n``, ``\\r``, VT, FF,
        U+001C-U+001E, U+0085, U+2028, U+2029) become spaces, the caption is stripped, and an empty
        caption becomes ``"."``.

    Returns
    -------
    list of str, length n
        Lower-cased PTB tokens joined by single spaces, pycocoevalcap's punctuation tokens removed;
        ``""`` for a caption without word tokens.

    Raises
    ------
    UnicodeEncodeError
        for a caption holding a lone surrogate (the Java path cannot write it as UTF-8 either).

    Notes
    -----
    Results are cached per distinct caption (bounded cache); a caption whose tokens may depend on the
    next caption (see the module docstring) is cached together with what matters of that caption.
    """
    n = len(texts)
    if not n:
        return []
    cache = _CACHE
    result: list = list(map(cache.get, texts))
    if None not in result:
        return result
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    missing = itertools.compress(texts, map(operator.is_, result, itertools.repeat(None)))
    _plain_batch(list(dict.fromkeys(missing)), cache)  # plain captions: all at once
    result = list(map(cache.get, texts))
    todo = [i for i, line in enumerate(result) if line is None]
    if not todo:
        return result
    prepared: list = [None] * n + [SENTINEL]

    def prep(k: int) -> str:
        c = prepared[k]
        if c is None:
            c = prepared[k] = _prepare(texts[k])
            if not c.isascii():
                c.encode("utf-8")  # a lone surrogate raises, as in the Java path
        return c

    whole = ends = whole_kind = None  # the whole Java input, built only if a tag may span lines
    for i in todo:
        if result[i] is not None:  # done with a multi-line tag
            continue
        raw = texts[i]
        line = cache.get(raw)  # a repeat of a caption done in this call
        if line is not None:
            result[i] = line
            continue
        caption = prep(i)
        line = _plain_line(caption) if caption.isascii() else None
        if line is not None:
            result[i] = cache[raw] = line
            continue
        following = prep(i + 1) + "\n" if i + 1 < n else SENTINEL
        tail_sensitive = _TAIL_SENSITIVE.search(caption) is not None
        if not (_may_span_lines(caption) or (tail_sensitive and _may_span_lines(following))):
            if tail_sensitive:
                m = _NEXT_SIGNATURE.match(following)
                key = (caption, m.group() if m else "")
                line = cache.get(key)
                if line is None:
                    line = cache[key] = _caption_line(caption, following)
            else:
                line = cache[raw] = _caption_line(caption, following)
            result[i] = line
            continue
        # A tag may run over several lines: scan the rest of the batch as one text, as Java does, until
        # a line end that no token crosses, followed by a caption that cannot start such a tag.
        if whole is None:
            for k in range(n):
                prep(k)
            whole = "\n".join(prepared)
            whole_kind = _text_kind(whole)
            ends = []
            acc = -1
            for c in prepared:
                acc += len(c) + 1
                ends.append(acc)
        j, pos, out = i, ends[i] - len(caption), []
        while True:
            stop = ends[j]
            if pos < stop:
                pos = _scan(whole, pos, stop, out, whole_kind)
            if pos == stop and (j + 1 == n or not _may_span_lines(prepared[j + 1])):
                break
            if j + 1 == n:
                raise RuntimeError("PTB tokeniser output is misaligned: a token runs into the end-of-batch sentinel")
            if pos == stop:
                out.append(_NL_TOKEN)
                pos += 1
            j += 1
        lines = _join_output([t if t is _NL_TOKEN else _lower(t) for t in out]).split("\n")
        for k in range(i, j + 1):
            result[k] = _postprocess(lines[k - i])
    return result


def _join_output(tokens: list) -> str:
    """Tokens as PTBTokenizer -preserveLines prints them: single spaces, a newline for each *NL*."""
    parts = []
    begin = True
    for tok in tokens:
        if tok is _NL_TOKEN:
            parts.append("\n")
            begin = True
        else:
            if not begin:
                parts.append(" ")
            parts.append(tok)
            begin = False
    return "".join(parts)
