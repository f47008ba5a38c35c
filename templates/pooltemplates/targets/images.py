"""Default images for targets that start containers; the image matrix will supply these later."""
CPU_IMAGE = "trainstack:cpu"
GPU_IMAGE = "trainstack:gpu"


def default_image(gpu: bool) -> str:
    return GPU_IMAGE if gpu else CPU_IMAGE
