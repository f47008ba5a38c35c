"""The README's Layout section names every module of the host tooling's top folder and of trainstack/image/."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def layout_block() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return re.search(r"^## Layout\n\n```\n(.*?)^```$", readme, re.S | re.M).group(1)


def test_layout_names_every_module_where_it_is() -> None:
    block = layout_block()
    top = block[block.index("trainstack/ "):block.index("  image/")]
    image = block[block.index("  image/"):block.index("  clusters/")]
    for folder, section in ((REPO / "trainstack", top), (REPO / "trainstack" / "image", image)):
        for module in sorted(folder.glob("*.py")):
            if module.name != "__init__.py":
                assert re.search(rf"^ +{re.escape(module.name)} ", section, re.M), f"{module} is not in the Layout"


def test_layout_names_only_modules_that_exist() -> None:
    named = re.findall(r"^ {4}([a-z_]+\.py) ", layout_block(), re.M)
    assert named and all((REPO / "trainstack" / "image" / name).is_file() for name in named)
