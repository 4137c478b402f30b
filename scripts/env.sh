# Sourced by the scripts: puts the CUDA toolkit on PATH when it is installed, and offers configure().
if [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# configure BUILD_DIR [meson options...]: sets up a build directory, or reconfigures an existing one.
configure() {
  local dir=$1
  shift
  if [ -f "$dir/build.ninja" ]; then
    meson configure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}
