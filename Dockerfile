# trainrun in a container, for Kubernetes (`trainrun k8s`, a Kubeflow MPIJob) or any host with
# the NVIDIA container toolkit:
#
#   docker build -t trainrun:latest .
#   docker run --gpus all --rm trainrun:latest trainrun --version
#
# Stage 1 builds trainrun and the CUDA plugin with the CUDA toolkit; stage 2 is the CUDA runtime
# image plus the shared libraries trainrun links (found from the binary itself, so the list never
# drifts from the build), Open MPI for the launcher, and sshd for mpi-operator's worker pods.
#
# The bases are build arguments, so the same file builds the CPU variant on any Debian 12 or
# Ubuntu 24.04 root (bench/container_check.sh builds it on a debootstrapped Debian 12 that was
# `docker import`ed, since no registry is reachable there):
#
#   docker build --build-arg BUILD_IMAGE=debian:bookworm --build-arg RUNTIME_IMAGE=debian:bookworm \
#       --build-arg CUDA=disabled -t trainrun:cpu .

ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04
ARG BUILD_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU}
ARG RUNTIME_IMAGE=nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}

FROM ${BUILD_IMAGE} AS build
# enabled: the GPU image; disabled: the CPU variant (meson's -Dcuda; nothing CUDA is built).
ARG CUDA=enabled
ENV DEBIAN_FRONTEND=noninteractive
# The build packages of scripts/setup.sh. Ubuntu 24.04 names them as Debian 12 does (oneDNN,
# CLI11 and doctest from universe; its oneDNN is 3.1, Debian's 2.6: trainrun calls only
# dnnl_sgemm, in both). gnuplot-nox is left out: only `trainrun report`'s plots call it.
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
# -Dcuda=enabled (the default): fail here rather than ship a GPU image without the GPU backend.
RUN meson setup build --buildtype=release -Dcuda=${CUDA} -Dtests=false \
    && ninja -C build trainrun $(test "${CUDA}" = disabled || echo kernels/libtrainrun_cuda.so)
# The binary and its plugin side by side (the plugin is looked up beside the executable).
RUN mkdir -p /out/bin && cp build/trainrun /out/bin/ \
    && if [ "${CUDA}" != disabled ]; then cp build/kernels/libtrainrun_cuda.so /out/bin/; fi
# The packages owning the libraries they load, less CUDA's (the runtime image has those). Each
# path is asked for as ldd prints it and as its real path: Debian 12 still ships some libraries
# under /lib (zlib1g), which dpkg knows only by that name.
RUN ldd /out/bin/* | awk '/=> \//{print $3}' | sort -u \
      | while read -r f; do echo "$f"; realpath "$f"; done | sort -u \
      | xargs -r dpkg -S 2>/dev/null | cut -d: -f1 | sort -u \
      | grep -vE '^(cuda-|libcu|libnccl|libnvjitlink|libc6$|libgcc|libstdc)' \
      > /out/runtime-packages.txt; \
    cat /out/runtime-packages.txt && test -s /out/runtime-packages.txt

FROM ${RUNTIME_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
# openmpi-bin: mpirun on the launcher pod and orted on the workers; openssh: how mpirun reaches
# the worker pods under mpi-operator (workers run `sshd -De`, the worker command `trainrun k8s`
# writes and the operator's default; the image's CMD is for a plain `docker run`).
RUN apt-get update -qq && xargs -a /tmp/runtime-packages.txt apt-get install -y -qq \
      --no-install-recommends openmpi-bin openssh-server openssh-client \
    && mkdir -p /run/sshd && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
# mpi-operator mounts only the job's keys at /root/.ssh (a Secret: read-only, its directory
# world-writable): no known_hosts can be kept there and the workers' host keys are new to the
# launcher, so ssh must not ask (it cannot) nor write one; sshd's StrictModes would refuse the
# keys for the directory's mode ("bad ownership or modes for directory /root/.ssh"). LogLevel ERROR:
# else each connection warns on the launcher's output that it added a host to known hosts.
RUN printf '%s\n' 'Host *' '    StrictHostKeyChecking no' '    UserKnownHostsFile /dev/null' \
      '    LogLevel ERROR' > /etc/ssh/ssh_config.d/mpi-operator.conf \
    && printf 'StrictModes no\n' > /etc/ssh/sshd_config.d/mpi-operator.conf
COPY --from=build /out/bin/ /opt/trainrun/bin/
COPY --from=build /src/configs/ /opt/trainrun/configs/
RUN ln -s /opt/trainrun/bin/trainrun /usr/local/bin/trainrun \
    && trainrun --version
# Containers run as root: let Open MPI do so too.
ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORKDIR /runs
CMD ["trainrun", "--help"]
