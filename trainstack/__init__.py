"""Build, verify and publish trainstack training images from images/matrix.yaml."""
