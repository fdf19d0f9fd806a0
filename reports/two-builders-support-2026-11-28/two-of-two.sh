#!/usr/bin/env bash
# 2-of-2 for one variant: the GPU runner's signed layout (its second-builder.tar, unpacked in dev/) + this
# machine's own image of its own tree, built from the same bundle. First this machine adds its signature to
# the runner's layout (its own layers copied in, `hermetic sign` into a copy of the runner's lookaside);
# then hermetic verify, skopeo and buildah with a policy requiring both OpenPGP keys, in-toto-verify with both
# builders' links.  Usage: two-of-two.sh DIR VARIANT RECORD IMAGE (RECORD, IMAGE: this machine's build).
set -uo pipefail
B=$1; V=$2; REC=$3; OWN=$4; cd $B
H="env PYTHONPATH=/work/main/src python3 -m hermetic"
ID=registry.example/llvm/$V:19.1.7
step() { echo; echo "== $*"; }
step "this machine's image and the runner's are one manifest"
jq -r '.manifests[0].digest' $OWN/index.json dev/signed/$V/index.json
step "add this machine's signature to the runner's layout"
rm -rf signed lookaside && cp -r dev/signed/$V signed && cp -r dev/lookaside lookaside
cp -n $OWN/blobs/sha256/* signed/blobs/sha256/
rm -rf debian-image && cp -r $OWN debian-image
$H sign signed --identity $ID --sign-key keys/debian.key --gpg-key keys/debian.gpg.key --lookaside lookaside; echo "exit $?"
ls lookaside/llvm/*/
step "verify: both keys, threshold 2"; $H verify --key keys/runner.pub --key keys/debian.pub --threshold 2 signed; echo "exit $?"
step "verify: both keys required, an unknown third named"; $H key generate keys/stranger --no-gpg --quiet 2>/dev/null
$H verify --key keys/runner.pub --key keys/debian.pub --key keys/stranger.pub signed >/dev/null 2>err.txt; echo "exit $? ($(grep -m1 why err.txt))"
# a registry of our own, plain HTTP on localhost
rm -rf reg && mkdir -p reg/data
cat > reg/config.yml <<C
version: 0.1
storage: {filesystem: {rootdirectory: $B/reg/data}}
http: {addr: 127.0.0.1:5087}
C
rm -rf reg2 && mkdir -p reg2/data && sed "s|$B/reg/data|$B/reg2/data|; s|5087|5088|" reg/config.yml > reg2/config.yml
docker-registry serve reg/config.yml > reg/log 2>&1 & REGPID=$!
docker-registry serve reg2/config.yml > reg2/log 2>&1 & REGPID2=$!; sleep 2
step "push the 2-of-2 layout"; $H push signed 127.0.0.1:5087/llvm/$V:19.1.7 --insecure --quiet; echo "exit $?"
step "push the runner's layout alone (one signature), as the same repository of a second registry"; rm -rf one && cp -r dev/signed/$V one
python3 - <<P
import json, shutil; from pathlib import Path
d=Path('$B/debian-image'); s=Path('$B/one'); m=json.loads((d/'blobs/sha256'/json.loads((d/'index.json').read_text())['manifests'][0]['digest'][7:]).read_text())
for l in [m['config'], *m['layers']]:
    t=s/'blobs/sha256'/l['digest'][7:]
    if not t.exists(): shutil.copyfile(d/'blobs/sha256'/l['digest'][7:], t)
P
$H push one 127.0.0.1:5088/llvm/$V:19.1.7 --insecure --quiet; echo "exit $?"
mkdir -p rd; printf 'docker:\n  127.0.0.1:5087:\n    lookaside: file://%s/lookaside\n    use-sigstore-attachments: true\n  127.0.0.1:5088:\n    lookaside: file://%s/lookaside-one\n    use-sigstore-attachments: true\n' $B $B > rd/hermetic.yaml
# the runner's OpenPGP signature of the one-signature copy, where containers/image looks for it
rm -rf lookaside-one && cp -r dev/lookaside lookaside-one
python3 - <<P
import json
req=lambda k:{"type":"signedBy","keyType":"GPGKeys","keyPath":"$B/keys/%s.gpg.pub"%k,
  "signedIdentity":{"type":"remapIdentity","prefix":"127.0.0.1:5087/llvm","signedPrefix":"registry.example/llvm"}}
req2=lambda k:{**req(k),"signedIdentity":{"type":"remapIdentity","prefix":"127.0.0.1:5088/llvm","signedPrefix":"registry.example/llvm"}}
json.dump({"default":[{"type":"reject"}],"transports":{"docker":{"127.0.0.1:5087":[req("runner"),req("debian")],
  "127.0.0.1:5088":[req2("runner"),req2("debian")]}}},open("$B/policy-both.json","w"),indent=1)
P
step "skopeo copy under a policy requiring the runner's and this machine's keys: the 2-of-2 image"
rm -rf got; skopeo --policy policy-both.json --registries.d rd copy --remove-signatures --src-tls-verify=false docker://127.0.0.1:5087/llvm/$V:19.1.7 oci:got 2>&1 | tail -2; echo "exit ${PIPESTATUS[0]}"
step "skopeo copy under the same policy: the image with the runner's signature only (must refuse)"
rm -rf got1; skopeo --policy policy-both.json --registries.d rd copy --remove-signatures --src-tls-verify=false docker://127.0.0.1:5088/llvm/$V:19.1.7 oci:got1 2>&1 | tail -1; echo "exit ${PIPESTATUS[0]}"
step "skopeo copy of the runner-only copy under a policy requiring the runner's key alone (accepted: the refusal above is the missing key)"
python3 -c "import json;p=json.load(open('$B/policy-both.json'));p['transports']['docker']['127.0.0.1:5088']=p['transports']['docker']['127.0.0.1:5088'][:1];json.dump(p,open('$B/policy-runner.json','w'))"
rm -rf got2; skopeo --policy policy-runner.json --registries.d rd copy --remove-signatures --src-tls-verify=false docker://127.0.0.1:5088/llvm/$V:19.1.7 oci:got2 2>&1 | tail -1; echo "exit ${PIPESTATUS[0]}"
kill $REGPID $REGPID2
step "in-toto: the runner's links and this machine's, a layout asking 2 of 2, in-toto-verify"
rm -rf ev && mkdir -p ev/links && cp dev/evidence/$V/links/*.link ev/links/
$H intoto links ev --record $REC --image debian-image --sign-key keys/debian.key 2>&1 | tail -1
$H intoto layout ev --builder keys/debian.pub --builder keys/runner.pub --threshold 2 --sign-key keys/owner.key 2>&1 | tail -1
ls ev/links
(cd ev && in-toto-verify --layout root.layout --verification-keys ../keys/owner.pub --link-dir links --inspection-timeout 300 2>&1 | tail -2); echo "exit ${PIPESTATUS[0]}"
step "in-toto: without the runner's build link (must refuse)"
mv ev/links/build.1e091693.link $B/build.runner.link; rm -rf ev/unpacked
(cd ev && in-toto-verify --layout root.layout --verification-keys ../keys/owner.pub --link-dir links --inspection-timeout 300 2>&1 | tail -1); echo "exit ${PIPESTATUS[0]}"
mv $B/build.runner.link ev/links/build.1e091693.link
step "buildah bud with COPY --from under the policy requiring both keys: the 2-of-2 image, then the runner-only copy (must refuse)"
docker-registry serve reg/config.yml > reg/log2 2>&1 & REGPID=$!
docker-registry serve reg2/config.yml > reg2/log2 2>&1 & REGPID2=$!; sleep 2
P=/usr/lib64/llvm-$V-19.1.7/lib/cmake
for host in 127.0.0.1:5087 127.0.0.1:5088; do
  rm -rf ctx-$host st-$host && mkdir -p ctx-$host
  printf 'FROM scratch\nCOPY --from=%s/llvm/%s:19.1.7 %s %s\n' $host $V $P $P > ctx-$host/Containerfile
  buildah --root $B/st-$host/s --runroot $B/st-$host/r --storage-driver vfs --log-level debug --registries-conf-dir rd bud \
    --signature-policy policy-both.json --isolation chroot --tls-verify=false -t consumer ctx-$host > bud-$host.log 2>&1
  echo "$host: exit $? ($(grep -m1 -oE 'Source image rejected[^"]*|COMMIT consumer|Storing signatures' bud-$host.log))"
done
kill $REGPID $REGPID2
