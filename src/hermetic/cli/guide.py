"""The words `hermetic --help` adds to the options: where to start, and examples for each command."""

from __future__ import annotations

# The figures are the README's, rounded; each is measured in a report cited by docs/performance.md.
START_HERE = """\
start here:
  hermetic variants                  the recipe's variants and what each one builds
  hermetic all --variant support     a first try: a small LLVM (LLVMSupport, LLVMDemangle) and its image
  hermetic all                       the main job: the nvptx LLVM, its image, the tilec wheel

  `all` runs these in order; run them one by one to stop between them:
    hermetic fetch -> hermetic source prune -> hermetic build llvm -> hermetic image llvm -> hermetic wheel

  what it costs: the LLVM build is nearly all of it. nvptx takes about half an hour on 2 cores and
  under ten minutes on 16; support about five minutes on 2 cores. A finished build whose inputs did
  not change is kept, so running `all` again takes seconds. Figures: docs/performance.md.

which check:
  hermetic inspect ARTIFACT        what is it? its kind, what it was built from, whether its
                                   attestations match; reads only, seconds
  hermetic verify-tree --record R DIR
                                   is this unpacked tree exactly what its record lists? every file's
                                   sha256; seconds, nothing rebuilt
  hermetic verify ARTIFACT         would a rebuild give the same bits? rebuilds from the record's
                                   pinned inputs and compares, as long as a build; with --key PUB it
                                   checks the signatures instead (add --rebuild for both)

`hermetic COMMAND --help` lists a command's options, with examples."""

# Keyed by the command's words after `hermetic`; each value is `hermetic COMMAND --help`'s last section.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "fetch": ("hermetic fetch                     sources, wheelhouse and toolchain of the default variant",
              "hermetic fetch --variant support   those of another variant"),
    "source prune": ("hermetic source prune --output .carry   the variant's pruned source and pruned.json, to carry",),
    "build llvm": ("hermetic build llvm --variant support   build (or keep, when its inputs are unchanged) one tree",
                   "hermetic build llvm --arch arm64        cross-build with the pinned zig"),
    "variants": ("hermetic variants",),
    "all": ("hermetic all --variant support                 minutes: a first try",
            "hermetic all                                   the nvptx LLVM, its image and the tilec wheel",
            "hermetic all --arch amd64,arm64 --variant support   both architectures, one image index",
            "hermetic all --bundle bundle/                  rebuild from a bundle, without network"),
    "toolchain list": ("hermetic toolchain list",),
    "toolchain slim": ("hermetic toolchain slim --output .zig   the pinned zig as its slim archive, to carry",),
    "toolchain compile-host": ("hermetic toolchain compile-host /srv/zig   the same zig for a distccd compile host",),
    "image llvm": ("hermetic image llvm --variant support               the layout under build/images/",
                   "hermetic image llvm --compression zstd --sign-key release.key"),
    "image index": ("hermetic image index --output llvm-index LAYOUT_AMD64 LAYOUT_ARM64",),
    "push": ("hermetic push build/images/llvm-nvptx-19.1.7-linux-amd64 registry.example.com/llvm-nvptx:19.1.7",
             "hermetic push --ca ca.pem --sign-key release.key LAYOUT registry.example.com/llvm-nvptx:19.1.7"),
    "pull": ("hermetic pull --unpack llvm registry.example.com/llvm-nvptx:19.1.7   the tree, checked against its record",
             "hermetic pull --layout img --arch arm64 registry.example.com/llvm-nvptx:19.1.7"),
    "verify-tree": ("hermetic verify-tree --record build/llvm/nvptx/record.json /usr/lib64/llvm-nvptx-19.1.7",),
    "wheel": ("hermetic wheel                                   tilec against the built nvptx tree",
              "hermetic wheel --python 3.12 --output dist/",
              "hermetic wheel --llvm build/llvm/nvptx/install/usr/lib64/llvm-nvptx-19.1.7   against a given prefix",
              "hermetic wheel --recipe llvmlite --llvm PREFIX   llvmlite's pinned sdist against a hermetic LLVM 22"),
    "wheelhouse": ("hermetic wheelhouse --dest .carry/wheelhouse",),
    "bundle": ("hermetic bundle --output bundle/              every input of the plan, one OCI layout",
               "hermetic bundle --with-release --sign-key release.key --output bundle/"),
    "bundle-show": ("hermetic bundle-show bundle/",),
    "verify": ("hermetic verify build/llvm/nvptx/record.json          rebuild the tree elsewhere and compare",
               "hermetic verify --key builder.pub build/images/llvm-nvptx-19.1.7-linux-amd64",
               "hermetic verify --key a.pub --key b.pub --threshold 2 --rebuild LAYOUT"),
    "attest": ("hermetic attest build/images/llvm-nvptx-19.1.7-linux-amd64",
               "hermetic attest --sign-key release.key build/wheels/tilec-0.1.0-*.whl"),
    "key generate": ("hermetic key generate release   writes release.key (0600) and release.pub",),
    "sign": ("hermetic sign --sign-key release.key --identity registry.example.com/llvm-nvptx:19.1.7 "
             "build/images/llvm-nvptx-19.1.7-linux-amd64",
             "hermetic sign --sign-key release.key --layout LAYOUT registry.example.com/llvm-nvptx:19.1.7",
             "hermetic sign --sign-key b.key --layout LAYOUT --identity registry.example.com/llvm-nvptx:19.1.7 "
             "THEIR-LAYOUT"),
    "intoto links": ("hermetic intoto links --record build/llvm/nvptx/record.json --image LAYOUT --sign-key b.key audit/",),
    "intoto layout": ("hermetic intoto layout --builder a.pub --builder b.pub --threshold 2 --sign-key owner.key audit/",),
    "inspect": ("hermetic inspect build/images/llvm-nvptx-19.1.7-linux-amd64",
                "hermetic inspect --json registry.example.com/llvm-nvptx:19.1.7",
                "hermetic inspect build/wheels/tilec-0.1.0-*.whl"),
}


def epilog(command: str) -> str | None:
    """`hermetic COMMAND --help`'s examples, or None for a command without any."""
    lines = EXAMPLES.get(command)
    if not lines:
        return None
    return "examples:\n" + "\n".join("  " + line for line in lines)
