"""depthbench: residual-connection architectures x width/depth aspect ratio, Hugging Face-native.

Install (CPU): ``pip install torch==2.13.0 && pip install -e ".[test]"``; a wheel: ``pip wheel . --no-deps -w dist``.

What ships is found, not listed: every folder under ``src/depthbench`` and the three top-level folders mapped into
the package (``modeling/`` -> ``depthbench.modeling``, ``model_cards/`` -> ``depthbench.model_cards``,
``eval_tasks/`` -> ``depthbench.eval_tasks``) is a package, and every file in them ships (code, run files, task
YAMLs and their data, card templates), so a new sub-package or data file needs no line here.
tests/test_packaging.py builds the wheel and checks it holds every tracked file of those folders.
"""

import os
import re

from setuptools import find_namespace_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))

PACKAGE_DIRS = {
    "depthbench": "src/depthbench",
    "depthbench.modeling": "modeling",  # the model code (also shipped to the Hub as remote code)
    "depthbench.model_cards": "model_cards",  # the model-card template
    "depthbench.eval_tasks": "eval_tasks",  # the lm-eval task folder (depthbench.evaluation.harness.tasks_dir)
}


def packages() -> list[str]:
    """Every folder of every mapped root, as a package name (folders without ``__init__.py`` count too)."""
    found = []
    for name, folder in PACKAGE_DIRS.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_namespace_packages(os.path.join(HERE, folder),
                                                                     exclude=["*__pycache__*"])]
    return sorted(found)


def version() -> str:
    """``__version__`` of ``src/depthbench/__init__.py`` (the one version string), read without importing it."""
    with open(os.path.join(HERE, "src", "depthbench", "__init__.py"), encoding="utf-8") as f:
        match = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.MULTILINE)
    if match is None:
        raise RuntimeError("src/depthbench/__init__.py has no line __version__ = \"...\"")
    return match.group(1)


def readme() -> str:
    path = os.path.join(HERE, "README.md")
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


setup(
    name="depthbench",
    version=version(),
    description="Residual-connection architectures across width/depth aspect ratios, Hugging Face-native",
    long_description=readme(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    keywords=["transformers", "residual connections", "hyper-connections", "language models", "depth", "lm-eval",
              "scaling"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "Operating System :: OS Independent",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    project_urls={
        "Paper": "https://arxiv.org/abs/2609.32534",
        "Study code": "https://github.com/keyu-wang-2002/DepthBench",
        "Released models": "https://huggingface.co/aspect-ratio-scaling",
    },
    python_requires=">=3.10",
    package_dir=PACKAGE_DIRS,
    packages=packages(),
    package_data={"": ["*"]},  # every file of every package folder (run files, task YAMLs and data, templates)
    exclude_package_data={"": ["*.pyc", "*.pyo"]},
    install_requires=[
        "torch>=2.4",
        "transformers>=5.23,<5.25",
        "accelerate>=1.10",
        "datasets>=4.0",
        "evaluate>=0.4",
        "safetensors>=0.4",
        "huggingface_hub>=1.0",
        "lm-eval>=0.4.13",
        "tokenizers>=0.21",
        "numpy",
        "matplotlib>=3.7",  # the sweep's plots are part of its results
        "pyyaml",
        "tqdm",
    ],
    extras_require={
        "track": ["tensorboard", "wandb"],
        "test": ["pytest>=8", "tensorboard", "ruff", "pyarrow", "peft>=0.21", "gguf>=0.10"],
        # GGUF sources for `depthbench upcycle --gguf-file` (transformers reads GGUF through the gguf package)
        "gguf": ["gguf>=0.10"],
        # Import-time dependencies of the upstream OLMo-core oracle (tests/hub/test_convert.py). OLMo-core itself and
        # cached-path are installed WITHOUT dependency resolution (their pins would downgrade huggingface_hub):
        #   pip install -e ".[test,oracle]" && pip install --no-deps ai2-olmo-core==3.0.0 cached-path==1.8.10
        "oracle": ["dataclass-extensions==0.5.0", "bettermap==1.3.1", "rich", "boto3", "google-cloud-storage>=1.32,<4"],
    },
    entry_points={"console_scripts": ["depthbench=depthbench.cli:main"]},
)
