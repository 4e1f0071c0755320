"""depthbench: residual-connection architectures x width/depth aspect ratio, Hugging Face-native.

Install (CPU): ``pip install torch==2.13.0 && pip install -e ".[test]"``.
"""

from setuptools import setup

setup(
    name="depthbench",
    version="0.1.0",
    description="Residual-connection architectures across width/depth aspect ratios, Hugging Face-native",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    package_dir={"depthbench": "src/depthbench", "depthbench.modeling": "modeling",
                 "depthbench.model_cards": "model_cards"},
    packages=["depthbench", "depthbench.data", "depthbench.modeling", "depthbench.model_cards", "depthbench.hub"],
    package_data={"depthbench": ["configs/*.yaml"], "depthbench.model_cards": ["*.md"],
                  "depthbench.hub": ["*.txt"]},  # the readout evidence sample (hub/readout.py)
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
        "test": ["pytest>=8", "tensorboard", "ruff", "pyarrow", "peft>=0.21"],
        # Import-time dependencies of the upstream OLMo-core oracle (tests/hub/test_convert.py). OLMo-core itself and
        # cached-path are installed WITHOUT dependency resolution (their pins would downgrade huggingface_hub):
        #   pip install -e ".[test,oracle]" && pip install --no-deps ai2-olmo-core==3.0.0 cached-path==1.8.10
        "oracle": ["dataclass-extensions==0.5.0", "bettermap==1.3.1", "rich", "boto3", "google-cloud-storage>=1.32,<4"],
    },
    entry_points={"console_scripts": ["depthbench=depthbench.cli:main"]},
)
