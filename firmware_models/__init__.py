"""What a servo's firmware exposes and does (layer 2): control tables, object dictionaries, modes, limits and units."""
