"""A model from the Hugging Face Hub without the Hub (docs/guides/images.md, "A model from the Hugging Face Hub"): a
folder as the Hub holds a model, mounted read-only, loads by its path with HF_HUB_OFFLINE=1, and a Hub name then
fails saying so rather than waiting on the network."""
import json


def test_a_mounted_model_folder_loads_offline(in_image, tmp_path):
    tmp_path.chmod(0o777)  # the image's user writes the folder
    in_image.run(["python", "/units/hub_folder.py", "save", "/models/tiny-gpt2"], timeout=300,
                 volumes={str(tmp_path): {"bind": "/models", "mode": "rw"}})
    output = in_image.run(["python", "/units/hub_folder.py", "load", "/models/tiny-gpt2"], timeout=300,
                          env={"HF_HUB_OFFLINE": "1"}, volumes={str(tmp_path): {"bind": "/models", "mode": "ro"}})
    loaded = json.loads(output.strip().splitlines()[-1])
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(loaded["files"]), loaded
    assert loaded["parameters"] > 0 and loaded["generated"] == 4, loaded
    assert loaded["hub_error"] and "offline" in loaded["hub_error"].lower(), loaded
