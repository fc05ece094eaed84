"""A small torchvision VisionTransformer (32x32 input, 8x8 patches, 2 layers): nn.MultiheadAttention, the
class token (expand, cat), position embedding, x[:, 0] (the models tests export it as `tiny_vit`)."""
from torchvision.models.vision_transformer import VisionTransformer


def build():
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128,
                             num_classes=10)
