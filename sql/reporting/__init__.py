"""The views of schema `reporting`, applied in file-name order; read by migrations.reporting."""
