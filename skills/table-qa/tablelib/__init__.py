"""Table QA building blocks: image cleaning for OCR, grid rebuilding from boxes, question solving."""
