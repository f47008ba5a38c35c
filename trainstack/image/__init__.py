"""The image pipeline: the matrix of flavors, the Dockerfile and build context rendered from it, the build, its
verification, manifest, SBOM, scan and push, and the README tables made from them."""
