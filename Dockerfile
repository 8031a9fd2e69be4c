# trainrun in a container, for Kubernetes (`trainrun k8s`, a Kubeflow MPIJob) or any host with
# the NVIDIA container toolkit:
#
#   docker build -t trainrun:latest .
#   docker run --gpus all --rm trainrun:latest trainrun --version
#
# Stage 1 builds trainrun and the CUDA plugin with the CUDA toolkit; stage 2 is the CUDA runtime
# image plus the shared libraries trainrun links (found from the binary itself, so the list never
# drifts from the build), Open MPI for the launcher, and sshd for mpi-operator's worker pods.

ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
ENV DEBIAN_FRONTEND=noninteractive
# The build packages of scripts/setup.sh (Ubuntu names them the same).
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      g++ meson ninja-build pkg-config libyaml-cpp-dev libcli11-dev libfmt-dev \
      libspdlog-dev libhdf5-dev hdf5-tools doctest-dev libopenmpi-dev openmpi-bin libdnnl-dev \
      libboost-dev \
      nlohmann-json3-dev \
      libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the build reads: a work tree's own build folders and runs stay out of the image.
COPY meson.build meson_options.txt ./
COPY include include
COPY src src
COPY kernels kernels
COPY bench bench
COPY man man
COPY configs configs
# -Dcuda=enabled: fail here rather than ship an image without the GPU backend.
RUN meson setup build --buildtype=release -Dcuda=enabled -Dtests=false \
    && ninja -C build trainrun kernels/libtrainrun_cuda.so
# The binary and its plugin side by side (the plugin is looked up beside the executable).
RUN mkdir -p /out/bin && cp build/trainrun build/kernels/libtrainrun_cuda.so /out/bin/
# The packages owning the libraries they load, less CUDA's (the runtime image has those).
RUN ldd /out/bin/trainrun /out/bin/libtrainrun_cuda.so | awk '/=> \//{print $3}' | sort -u \
      | xargs -r realpath | xargs -r dpkg -S 2>/dev/null | cut -d: -f1 | sort -u \
      | grep -vE '^(cuda-|libcu|libnccl|libnvjitlink|libc6$|libgcc|libstdc)' \
      > /out/runtime-packages.txt; \
    cat /out/runtime-packages.txt && test -s /out/runtime-packages.txt

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
# openmpi-bin: mpirun on the launcher pod and orted on the workers; openssh: how mpirun reaches
# the worker pods under mpi-operator (workers run `sshd -De`).
RUN apt-get update -qq && xargs -a /tmp/runtime-packages.txt apt-get install -y -qq \
      --no-install-recommends openmpi-bin openssh-server openssh-client \
    && mkdir -p /run/sshd && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /out/bin/ /opt/trainrun/bin/
COPY --from=build /src/configs/ /opt/trainrun/configs/
RUN ln -s /opt/trainrun/bin/trainrun /usr/local/bin/trainrun \
    && trainrun --version
# Containers run as root: let Open MPI do so too.
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORKDIR /runs
CMD ["trainrun", "--help"]
