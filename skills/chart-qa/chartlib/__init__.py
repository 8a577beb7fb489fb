"""Chart reading for the chart-qa skill: text layout (axes, labels, legend), pixel marks, and question answering."""
