"""Built-in local experts (CPU, offline). Each module holds one expert class; cards name them by `module:Class`."""

from .protocols import Barcode, ChatReply, TextBox

__all__ = ["Barcode", "ChatReply", "TextBox"]
