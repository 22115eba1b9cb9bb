"""Published training and inference results, and the script that compares gpuwise's predictions with them."""
