#!/usr/bin/python3
"""Exports a torchvision model (or FILE.py:FUNCTION) to ONNX with torch.onnx.export, with the same random
weights as tools/torch2kiln.py --weights (seeded; norms' affine and statistics randomized too), and writes
  OUT/model.onnx           the model (input 'input', output 'logits'), its weights as initializers
  OUT/inputs/input.npy     a random input image
  OUT/expected/logits.npy  PyTorch's output for it, computed in float64 from the same float32 weights
so that `kiln run OUT/model.onnx --inputs OUT/inputs` can be compared with PyTorch (tests/models/check_onnx.sh).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch2kiln  # noqa: E402  (build_model, randomize, expected_output, save_npy; needs torch)
import torch  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a torchvision model name (resnet18, ...) or FILE.py:FUNCTION")
    ap.add_argument("--resolution", type=int, default=64, help="input height and width (default 64)")
    ap.add_argument("--opset", type=int, default=13, help="ONNX opset to export (default 13)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dynamic-batch", type=int, default=0, metavar="N",
                    help="export the batch dim as dynamic ('batch'), and write inputs and expected outputs at batch N")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    model = torch2kiln.build_model(args.model).eval()
    torch2kiln.randomize(model, args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    batch = args.dynamic_batch if args.dynamic_batch > 0 else 1
    image = torch.randn((batch, 3, args.resolution, args.resolution), generator=gen)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "model.onnx")
    # A dynamic batch: the dim is exported as the symbol 'batch', as serving exports do.
    dynamic = {"input": {0: "batch"}, "logits": {0: "batch"}} if args.dynamic_batch > 0 else None
    with torch.no_grad():
        torch.onnx.export(model, image, path, opset_version=args.opset, input_names=["input"],
                          output_names=["logits"], dynamic_axes=dynamic)
    image = image.numpy()
    torch2kiln.save_npy(os.path.join(args.out, "inputs", "input.npy"), image)
    logits = torch2kiln.expected_output(model, image, "f32")
    torch2kiln.save_npy(os.path.join(args.out, "expected", "logits.npy"), logits)
    print(f"wrote {path} (opset {args.opset}), {args.out}/inputs/input.npy, {args.out}/expected/logits.npy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
